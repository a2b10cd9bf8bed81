"""Search latency benchmark: 100,000 chunks over 100 spaces, every mode, 1 and 4 spaces.

    python bench/search_bench.py                    # embedded: tantivy + NumpyVectorIndex
    python bench/search_bench.py --target real      # OpenSearch (deploy/local, or
                                                    # ENGRAM_TEST_OPENSEARCH_URL) + vectors
    python bench/search_bench.py contention         # query embedding during indexing
    python bench/search_bench.py workers            # `engram serve search --workers 1, 2`
                                                    # against the embedding ceiling

For each target it measures twice: through the service layer (SearchService called in
process: no gRPC, no protobuf) and through gRPC against a server process (`engram dev` for
embedded; `search_on_backends` for real), driven by ghz so the client does not take the
server's CPU. Per mode it prints p50/p99 at concurrency 1 and QPS at concurrency 16, and
hybrid / max(lexical, semantic) from the same run.

Corpus: synthetic English sentences from a fixed grammar (seeded); each chunk joins 5-7 of
4,000 distinct sentences (~5 % carry an identifier such as ERR_4021 or deploy-2026-03-03),
10 chunks per document, spaces of uneven size. Vectors: every distinct sentence is embedded
once by the real model and a chunk's vector is the normalised sum of its sentences'
vectors - the same space and neighbourhood structure as embedding each chunk, at 1/25 of
the cost (embedding 100k chunks would take ~20 minutes here). Queries are distinct
sentences of the same grammar, embedded by the real model *inside* the measured call; every
query text is used once, so the query cache never hides that cost (a separate warm row
repeats queries on purpose). The corpus is built once per --work-dir and reused.

Every loop is bounded by a count and a time cap. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import GHZ, bench_token, closed_loop, ensure_ghz, free_port, spawn
from cpu_shares import CpuWindow

from engram.authz.enforcement import FixedPrincipalAuthenticator, PolicyAuthorizer
from engram.domain.chunks import Chunk, chunk_id
from engram.domain.fusion import FusionParams, RankedHit, fuse
from engram.domain.principals import LOCAL_ADMIN
from engram.domain.spaces import SpaceRef, Visibility
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import KeywordIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.runtime.settings import Settings
from engram.search.embedders import ModelEmbedders
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchMode, SearchOptions, SearchQuery, SearchService

SELF = Path(__file__).resolve()
ROOT = SELF.parents[1]
SEED = 20261130
DISTINCT_SENTENCES = 4000
# Bump when the corpus recipe changes: a loaded index is reused per version and size.
CORPUS_VERSION = 2
CHUNKS_PER_DOCUMENT = 10
LIMIT = 10
MODES = (SearchMode.HYBRID, SearchMode.LEXICAL, SearchMode.SEMANTIC)
PROTO_MODES = {
    SearchMode.HYBRID: "SEARCH_MODE_HYBRID",
    SearchMode.LEXICAL: "SEARCH_MODE_LEXICAL",
    SearchMode.SEMANTIC: "SEARCH_MODE_SEMANTIC",
}

# --- synthetic English ----------------------------------------------------------------------

NAMES = (
    "Priya Omar Lena Marco Aiko Tomas Grace Nikhil Sofia Daniel Mei Jonas Amara Felix Hana "
    "Ravi Clara Mateo Yusuf Elena Kofi Ingrid Paulo Zara Viktor Noor Emil Leila Hugo Alma"
).split()
SUBJECTS = (*NAMES, "the team", "our agent", "the reviewer", "the on-call engineer", "support")
VERBS = (
    "reviewed deployed fixed planned measured discussed rewrote migrated tested archived "
    "benchmarked documented cancelled approved rejected scheduled profiled refactored "
    "monitored rolled back patched upgraded replaced debugged merged released restored "
    "configured audited summarised estimated prioritised shipped drafted translated cleaned "
    "labelled indexed compressed validated mirrored"
).split()
VERBS_BASE = (
    "review deploy fix plan measure discuss rewrite migrate test archive benchmark document "
    "cancel approve reject schedule profile refactor monitor patch upgrade replace debug "
    "merge release restore configure audit summarise estimate prioritise ship draft"
).split()
ADJECTIVES = (
    "slow fast broken stable flaky new old noisy quiet critical minor urgent expensive cheap "
    "secure fragile shared private remote local nightly weekly quarterly legacy modern "
    "overdue careful risky manual automatic verbose empty full stale fresh hidden public "
    "internal external duplicate missing partial complete encrypted compressed cached "
    "throttled delayed healthy degraded"
).split()
NOUNS = (
    "database cache queue invoice dashboard pipeline release build report budget contract "
    "schema index cluster server laptop printer kitchen garden recipe novel playlist ticket "
    "incident alert backup migration roadmap interview meeting offsite workshop newsletter "
    "survey experiment model dataset notebook spreadsheet calendar password certificate "
    "firewall router battery charger bicycle ferry train flight hotel passport visa tent "
    "piano guitar camera painting museum bakery market harbour bridge tunnel tower castle "
    "forest river mountain island desert glacier volcano meadow orchard vineyard lighthouse "
    "telescope microscope vaccine clinic pharmacy hospital school library stadium theatre "
    "festival parade election treaty lawsuit patent merger startup invoice payroll pension "
    "mortgage warehouse shipment courier drone satellite antenna reactor turbine pipeline"
).split()
PLACES = (
    "Lisbon Oslo Nairobi Kyoto Lima Dublin Cairo Hanoi Quebec Tallinn Porto Seville Bergen "
    "Accra Osaka Cusco Galway Aswan Hue Valencia"
).split()
TIMES = (
    "on Monday",
    "on Tuesday",
    "on Friday",
    "last week",
    "yesterday",
    "this morning",
    "after lunch",
    "before the holidays",
    "during the outage",
    "at the retro",
    "in March",
    "in the spring",
    "overnight",
    "at noon",
)
PREPOSITIONS = ("near", "behind", "inside", "under", "beside", "beyond", "across", "around")


def sentence(rng: random.Random) -> str:
    """One sentence of the grammar (about 1 in 20 carries an identifier)."""
    s, v, a, n = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(ADJECTIVES), rng.choice(NOUNS)
    n2, a2 = rng.choice(NOUNS), rng.choice(ADJECTIVES)
    roll = rng.random()
    if roll < 0.025:
        return f"Ticket ERR_{rng.randint(1000, 9999)} says the {a} {n} {v} the {n2}."
    if roll < 0.05:
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        return f"Release deploy-2026-{month:02d}-{day:02d} {v} the {a} {n}."
    template = rng.randrange(6)
    if template == 0:
        return f"{s.capitalize()} {v} the {a} {n} {rng.choice(TIMES)}."
    if template == 1:
        return f"The {n} in {rng.choice(PLACES)} was {a} after {s} {v} the {n2}."
    if template == 2:
        return f"{s.capitalize()} noted that the {a} {n} sits {rng.choice(PREPOSITIONS)} the {n2}."
    if template == 3:
        return f"Next week {s} will {rng.choice(VERBS_BASE)} the {a} {n} with the {a2} {n2}."
    if template == 4:
        return f"Nobody expected the {n} to be so {a} {rng.choice(TIMES)}."
    return f"In {rng.choice(PLACES)}, {s} {v} a {a} {n} and a {a2} {n2}."


def query_text(rng: random.Random) -> str:
    """A query of the kinds an agent sends: a question, a phrase, or a bare identifier."""
    roll = rng.random()
    if roll < 0.05:
        return f"ERR_{rng.randint(1000, 9999)}"
    if roll < 0.10:
        return f"deploy-2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    a, n, n2 = rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(NOUNS)
    template = rng.randrange(5)
    if template == 0:
        return f"what did {rng.choice(SUBJECTS)} {rng.choice(VERBS_BASE)} about the {a} {n}"
    if template == 1:
        return f"{a} {n} {rng.choice(PREPOSITIONS)} the {n2} in {rng.choice(PLACES)}"
    if template == 2:
        return f"why was the {n} {a} {rng.choice(TIMES)}"
    if template == 3:
        return f"{n} {rng.choice(VERBS)} {rng.choice(TIMES)}"
    return f"who {rng.choice(VERBS)} the {a} {n2}"


def distinct_queries(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < count:
        found[query_text(rng)] = None
    return list(found)


# --- the corpus -----------------------------------------------------------------------------


def space_sizes(chunks: int, spaces: int, rng: np.random.Generator) -> list[int]:
    """Uneven space sizes (lognormal) summing to `chunks`."""
    weights = rng.lognormal(0.0, 0.6, spaces)
    sizes = np.maximum((weights / weights.sum() * chunks).astype(int), CHUNKS_PER_DOCUMENT)
    sizes[np.argmax(sizes)] += chunks - int(sizes.sum())
    return [int(size) for size in sizes]


def space_ref(number: int) -> SpaceRef:
    return SpaceRef(Visibility.PRIVATE, LOCAL_ADMIN.tenant, f"s{number:03d}")


async def sentence_vectors(sentences: list[str], cache: Path) -> np.ndarray:
    digest = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:16]
    path = cache / f"sentences-{digest}.npy"
    if path.exists():
        return np.load(path)
    embedder = LocalOnnxEmbedder()
    try:
        started = time.perf_counter()
        vectors = await embedder.embed_documents(sentences)
        print(f"embedded {len(sentences)} sentences in {time.perf_counter() - started:.1f} s")
    finally:
        embedder.close()
    np.save(path, vectors)
    return vectors


class Corpus:
    """Documents (each a list of chunks) and their vectors, built from a seed."""

    def __init__(self, chunks: int, spaces: int, sentences: list[str], vectors: np.ndarray):
        rng = np.random.default_rng(SEED)
        self.spaces = spaces
        self.sizes = space_sizes(chunks, spaces, rng)
        # Zipf-like sentence popularity, so some topics are common and some rare.
        popularity = 1.0 / (np.arange(len(sentences)) + 20.0)
        popularity /= popularity.sum()
        self.documents: list[tuple[SpaceRef, str, list[Chunk]]] = []
        rows: list[np.ndarray] = []
        for number, size in enumerate(self.sizes):
            ref = space_ref(number)
            for start in range(0, size, CHUNKS_PER_DOCUMENT):
                count = min(CHUNKS_PER_DOCUMENT, size - start)
                doc_number = start // CHUNKS_PER_DOCUMENT
                document_id = f"bench-{number:03d}-{doc_number:05d}"
                path = f"notes/{NOUNS[doc_number % len(NOUNS)]}/doc-{doc_number:05d}.md"
                chunks = []
                for index in range(count):
                    picks = rng.choice(len(sentences), size=int(rng.integers(5, 8)), p=popularity)
                    chunks.append(
                        Chunk(
                            chunk_id=chunk_id(document_id, index),
                            document_id=document_id,
                            space_id=ref.id,
                            tenant=ref.tenant,
                            path=path,
                            chunk_index=index,
                            doc_version=1,
                            content=" ".join(sentences[i] for i in picks),
                        )
                    )
                    summed = vectors[picks].sum(axis=0)
                    rows.append(summed / np.linalg.norm(summed))
                self.documents.append((ref, path, chunks))
        self.vectors = np.stack(rows).astype(np.float32)

    @property
    def chunk_count(self) -> int:
        return int(self.vectors.shape[0])


async def bounded_gather(work: Sequence[Callable[[], Awaitable[object]]], limit: int) -> None:
    queue = list(reversed(work))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    await asyncio.gather(*(worker() for _ in range(limit)))


async def load_vectors(corpus: Corpus, directory: Path, model: Any) -> None:
    index = NumpyVectorIndex(directory)
    await index.open()
    try:
        await index.ensure_collection(model)
        await index.activate(model.model_id)
        row = 0
        writes = []
        for ref, path, chunks in corpus.documents:
            matrix = corpus.vectors[row : row + len(chunks)]
            row += len(chunks)
            writes.append(
                lambda r=ref, p=path, c=chunks, m=matrix: index.replace_chunks(
                    model.model_id, r.id, p, c, m
                )
            )
        await bounded_gather(writes, 32)
    finally:
        await index.close()


async def load_keyword(corpus: Corpus, index: KeywordIndex, *, concurrency: int = 32) -> None:
    writes = [
        lambda r=ref, p=path, c=chunks: index.replace_chunks(r.id, p, c)
        for ref, path, chunks in corpus.documents
    ]
    await bounded_gather(writes, concurrency)


# --- measuring ------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


async def timed(
    operation: Callable[[int], Awaitable[object]], *, count: int, concurrency: int, cap: float
) -> tuple[list[float], float]:
    """`closed_loop`, returning (latencies in ms, operations per second)."""
    latencies, elapsed = await closed_loop(operation, count=count, concurrency=concurrency, cap=cap)
    return latencies, len(latencies) / elapsed


class Queries:
    """Hands out distinct query texts, so no measured call ever hits the query cache."""

    def __init__(self, seed: int) -> None:
        self._texts = distinct_queries(60_000, seed)
        self._next = 0

    def take(self, count: int) -> list[str]:
        taken = self._texts[self._next : self._next + count]
        self._next += count
        if len(taken) < count:
            raise SystemExit("out of distinct queries: raise the pool size")
        return taken


def space_sets(spaces: int, width: int, count: int, seed: int) -> list[list[SpaceRef]]:
    rng = random.Random(seed)
    return [[space_ref(n) for n in rng.sample(range(spaces), width)] for _ in range(count)]


Row = tuple[str, ...]


def mode_rows(
    width: int, c1: dict[SearchMode, list[float]], qps: dict[SearchMode, float]
) -> list[Row]:
    rows: list[Row] = [
        (
            str(width),
            mode.value,
            f"{percentile(c1[mode], 50):.2f}",
            f"{percentile(c1[mode], 99):.2f}",
            f"{qps[mode]:.0f}",
        )
        for mode in MODES
    ]
    for q in (50, 99):
        single = max(percentile(c1[SearchMode.LEXICAL], q), percentile(c1[SearchMode.SEMANTIC], q))
        ratio = percentile(c1[SearchMode.HYBRID], q) / single
        rows.append((str(width), f"hybrid / max(lexical, semantic), p{q}", f"{ratio:.2f}", "", ""))
    return rows


async def measure_service(
    service: SearchService,
    keyword: KeywordIndex,
    vector: NumpyVectorIndex,
    embedder: LocalOnnxEmbedder,
    args: argparse.Namespace,
    queries: Queries,
) -> tuple[list[Row], list[Row]]:
    """(mode rows, component rows) through SearchService in this process. At concurrency 1
    the three modes take turns, call by call, so each sees the same background load."""
    count, cap = args.queries, args.time_cap
    rows: list[Row] = []
    turns = len(MODES)
    for width in (1, 4):
        sets = space_sets(args.spaces, width, count * 6 + 30, seed=width)
        texts = queries.take(count * 6 + 30)

        async def one(
            i: int,
            mode: SearchMode,
            sets: list[list[SpaceRef]] = sets,
            texts: list[str] = texts,
        ) -> None:
            query = SearchQuery(spaces=sets[i], text=texts[i], mode=mode, limit=LIMIT)
            await service.search(LOCAL_ADMIN, query)

        for i in range(30):  # pools, allocator, page cache
            await one(i, MODES[i % turns])
        c1: dict[SearchMode, list[float]] = {mode: [] for mode in MODES}

        async def interleaved(i: int, c1: dict[SearchMode, list[float]] = c1) -> None:
            mode = MODES[i % turns]
            started = time.perf_counter()
            await one(30 + i, mode)
            c1[mode].append((time.perf_counter() - started) * 1000)

        await timed(interleaved, count=count * turns, concurrency=1, cap=cap * turns)
        qps: dict[SearchMode, float] = {}
        offset = 30 + count * turns
        for number, mode in enumerate(MODES):
            base = offset + number * count

            async def many(i: int, mode: SearchMode = mode, base: int = base) -> None:
                await one(base + i % count, mode)

            _, qps[mode] = await timed(many, count=count, concurrency=16, cap=cap)
        rows += mode_rows(width, c1, qps)
    # Warm: the same 200 queries again (query vectors from the cache).
    warm_texts = queries.take(200)
    warm_sets = space_sets(args.spaces, 1, 200, seed=9)

    async def hybrid(i: int) -> None:
        query = SearchQuery(spaces=warm_sets[i], text=warm_texts[i], limit=LIMIT)
        await service.search(LOCAL_ADMIN, query)

    await timed(hybrid, count=200, concurrency=1, cap=cap)
    warm, _ = await timed(hybrid, count=200, concurrency=1, cap=cap)
    rows.append(
        (
            "1",
            "hybrid, query vector cached",
            f"{percentile(warm, 50):.2f}",
            f"{percentile(warm, 99):.2f}",
            "",
        )
    )
    return rows, await measure_components(keyword, vector, embedder, args, queries)


async def step_samples(
    keyword: KeywordIndex,
    vector: NumpyVectorIndex,
    embedder: LocalOnnxEmbedder,
    args: argparse.Namespace,
    queries: Queries,
    widths: Sequence[int],
) -> dict[str, list[float]]:
    """Latencies (ms, concurrency 1) of each step of a hybrid search alone: "embed" (the
    query embedding), and per number of spaces w "bm25 w" and "knn w" (top-50 each)."""
    count, cap = args.queries, args.time_cap
    texts = queries.take(count)

    async def embed(i: int) -> None:
        await embedder.embed_query(texts[i])

    found = {"embed": (await timed(embed, count=count, concurrency=1, cap=cap))[0]}
    vectors = await embedder.embed_documents(texts[:200])
    model_id = embedder.model.model_id
    for width in widths:
        sets = space_sets(args.spaces, width, count, seed=20 + width)
        ids = [[ref.id for ref in refs] for refs in sets]

        async def bm25(i: int, ids: list[list[str]] = ids) -> None:
            await keyword.search(ids[i], texts[i], limit=50)

        async def knn(i: int, ids: list[list[str]] = ids) -> None:
            await vector.search(ids[i], vectors[i % 200], limit=50, model_id=model_id)

        for name, operation in ((f"bm25 {width}", bm25), (f"knn {width}", knn)):
            found[name] = (await timed(operation, count=count, concurrency=1, cap=cap))[0]
    return found


async def measure_components(
    keyword: KeywordIndex,
    vector: NumpyVectorIndex,
    embedder: LocalOnnxEmbedder,
    args: argparse.Namespace,
    queries: Queries,
) -> list[Row]:
    """Where a hybrid search's time goes: each step alone, at concurrency 1."""
    samples = await step_samples(keyword, vector, embedder, args, queries, (1, 4))
    names = {"embed": "embed query (local model)"}
    for width in (1, 4):
        names[f"bm25 {width}"] = f"BM25 top-50, {width} space(s)"
        names[f"knn {width}"] = f"vector top-50, {width} space(s)"
    rows: list[Row] = [
        (label, f"{percentile(samples[key], 50):.2f}", f"{percentile(samples[key], 99):.2f}")
        for key, label in names.items()
    ]
    lists = [RankedHit(f"c{i}", 50.0 - i) for i in range(50)]
    other = [RankedHit(f"c{i * 2}", 1.0 - i / 100) for i in range(50)]
    params = FusionParams()
    started = time.perf_counter()
    for _ in range(2000):
        fuse(lists, other, params, limit=LIMIT)
    fusion_ms = (time.perf_counter() - started) / 2000 * 1000
    rows.append(("fusion of two top-50 lists", f"{fusion_ms:.3f}", ""))
    return rows


def ghz_rows(addr: str, args: argparse.Namespace, queries: Queries, workdir: Path) -> list[Row]:
    """The same matrix through gRPC, driven by ghz, one distinct query per call; at
    concurrency 1 the modes take turns (ghz sends the messages round-robin, and reports
    each call's latency in order)."""
    rows: list[Row] = []
    count = args.queries
    data = workdir / "ghz-data.json"
    turns = len(MODES)
    for width in (1, 4):
        sets = space_sets(args.spaces, width, count * 6 + 30, seed=100 + width)
        texts = queries.take(count * 6 + 30)
        messages = [
            {
                "spaces": [{"visibility": "VISIBILITY_PRIVATE", "name": r.name} for r in refs],
                "query": text,
                "limit": LIMIT,
                "mode": PROTO_MODES[MODES[i % turns]],
            }
            for i, (text, refs) in enumerate(zip(texts, sets, strict=True))
        ]
        # The first 30 warm the connection and the server; they are not counted.
        data.write_text(json.dumps(messages[:30]))
        run_ghz(addr, data, 30, 1, args.time_cap)
        data.write_text(json.dumps(messages[30 : 30 + count * turns]))
        report = run_ghz(addr, data, count * turns, 1, args.time_cap * turns)
        c1: dict[SearchMode, list[float]] = {mode: [] for mode in MODES}
        for i, detail in enumerate(report["details"]):
            c1[MODES[i % turns]].append(detail["latency"] / 1e6)
        qps: dict[SearchMode, float] = {}
        for number, mode in enumerate(MODES):
            start = 30 + count * turns + number * count
            batch = [{**m, "mode": PROTO_MODES[mode]} for m in messages[start : start + count]]
            data.write_text(json.dumps(batch))
            qps[mode] = float(run_ghz(addr, data, count, 16, args.time_cap)["rps"])
        rows += mode_rows(width, c1, qps)
    return rows


def run_ghz(
    addr: str,
    data: Path,
    count: int,
    concurrency: int,
    cap: float,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """ghz's JSON report of one run; exits on any failed call. `extra`: more ghz flags."""
    command = [
        str(GHZ),
        *extra,
        "--insecure",
        "--proto",
        str(ROOT / "protos/engram/v1/search.proto"),
        "--import-paths",
        str(ROOT / "protos"),
        "--call",
        "engram.v1.SearchService.Search",
        "--data-file",
        str(data),
        "-c",
        str(concurrency),
        "-n",
        str(count),
        "--format",
        "json",
        addr,
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=cap * 4)
    report: dict[str, Any] = json.loads(completed.stdout)
    codes = report.get("statusCodeDistribution", {})
    if set(codes) != {"OK"}:
        raise SystemExit(f"Search failed: {codes} {report.get('errorDistribution')}")
    return report


@contextlib.asynccontextmanager
async def server_process(
    command: list[str], env: dict[str, str], log: Path, port: int
) -> AsyncIterator[str]:
    async with server_started(command, env, log, port):
        yield f"127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def server_started(
    command: list[str], env: dict[str, str], log: Path, port: int
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """The server process, once its port accepts gRPC; SIGTERM at the end."""
    import grpc

    process = await asyncio.to_thread(spawn, command, env, log)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 120)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, 30)
        except subprocess.TimeoutExpired:
            process.kill()


def server_env() -> dict[str, str]:
    return {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
    }


def load_launcher() -> Any:
    spec = importlib.util.spec_from_file_location("backends", ROOT / "deploy/local/backends.py")
    assert spec and spec.loader
    launcher = importlib.util.module_from_spec(spec)
    sys.modules["backends"] = launcher
    spec.loader.exec_module(launcher)
    return launcher


# --- the runs -------------------------------------------------------------------------------


async def prepare(args: argparse.Namespace) -> tuple[Corpus, Path]:
    workdir: Path = args.work_dir
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    rng = random.Random(SEED)
    found: dict[str, None] = {}
    while len(found) < DISTINCT_SENTENCES:
        found[sentence(rng)] = None
    sentences = list(found)
    vectors = await sentence_vectors(sentences, workdir)
    started = time.perf_counter()
    corpus = Corpus(args.chunks, args.spaces, sentences, vectors)
    print(
        f"corpus: {corpus.chunk_count:,} chunks in {len(corpus.documents):,} documents, "
        f"{args.spaces} spaces ({min(corpus.sizes)}-{max(corpus.sizes)} chunks each), "
        f"{np.mean([len(c.content) for _, _, cs in corpus.documents for c in cs]):.0f} "
        f"characters per chunk; built in {time.perf_counter() - started:.1f} s"
    )
    data_dir = workdir / f"engram-v{CORPUS_VERSION}-{args.chunks}-{args.spaces}"
    marker = data_dir / "bench-loaded"
    if not marker.exists():
        shutil.rmtree(data_dir, ignore_errors=True)
        started = time.perf_counter()
        model = LocalOnnxEmbedder().model
        await load_vectors(corpus, data_dir / "vectors", model)
        keyword = TantivyKeywordIndex(data_dir / "keyword")
        await keyword.open()
        try:
            await load_keyword(corpus, keyword)
        finally:
            await keyword.close()
        marker.write_text("ok\n")
        print(f"loaded the embedded indexes in {time.perf_counter() - started:.1f} s")
    return corpus, data_dir


def search_embedder(settings: Settings) -> LocalOnnxEmbedder:
    """Search's query embedder as the settings build it (threads, micro-batching window)."""
    return LocalOnnxEmbedder(
        threads=settings.search_embed_threads,
        query_window=settings.search_embed_batch_window_ms / 1000,
        query_max_batch=settings.search_embed_max_batch,
    )


async def measure_in_process(
    keyword: KeywordIndex, data_dir: Path, args: argparse.Namespace, queries: Queries
) -> tuple[list[Row], list[Row]]:
    """SearchService over `keyword` and the embedded vector index, measured in process."""
    vector = NumpyVectorIndex(data_dir / "vectors")
    settings = Settings()
    embedder = search_embedder(settings)
    await keyword.open()
    await vector.open()
    try:
        service = SearchService(
            keyword,
            vector,
            ModelEmbedders.serving(embedder),
            PolicyAuthorizer(),
            # The legs' deadline as the server's settings give it (ENGRAM_SEARCH_BACKEND_
            # TIMEOUT_SECONDS), so a loaded machine can be measured without timeouts.
            options=SearchOptions(backend_timeout_seconds=settings.search_backend_timeout_seconds),
            query_cache=QueryEmbeddingCache(1024),
        )
        await embedder.embed_query("warm up")
        return await measure_service(service, keyword, vector, embedder, args, queries)
    finally:
        await keyword.close()
        await vector.close()
        embedder.close()


async def run_embedded(args: argparse.Namespace, data_dir: Path) -> None:
    queries = Queries(seed=1)
    keyword = TantivyKeywordIndex(data_dir / "keyword")
    rows, components = await measure_in_process(keyword, data_dir, args, queries)
    print_rows("embedded, service layer", rows, components)
    if ensure_ghz() is None:
        print("ghz needs Go to build (go install from the Go module proxy): no gRPC figures")
        return
    port = free_port()
    # `engram dev` moves the exact vector index it finds into Qdrant Edge when it opens:
    # it gets a copy, so the loaded corpus stays reusable by the next run.
    served = args.work_dir / "engram-dev-data"
    await asyncio.to_thread(shutil.rmtree, served, ignore_errors=True)
    await asyncio.to_thread(shutil.copytree, data_dir, served)
    command = [
        sys.executable,
        "-m",
        "engram",
        "dev",
        "--port",
        str(port),
        "--data-dir",
        str(served),
    ]
    async with server_process(command, server_env(), args.work_dir / "server.log", port) as addr:
        rows = await asyncio.to_thread(ghz_rows, addr, args, queries, args.work_dir)
    print_rows("embedded, gRPC (`engram dev`)", rows, [])


@contextlib.asynccontextmanager
async def opensearch_loaded(
    args: argparse.Namespace, corpus: Corpus
) -> AsyncIterator[tuple[str, str]]:
    """(url, alias) of an OpenSearch index holding the corpus (loaded on first use)."""
    backend = None
    url = os.environ.get("ENGRAM_TEST_OPENSEARCH_URL")
    if not url:
        launcher = load_launcher()
        launcher.provision(["opensearch"])
        backend = await asyncio.to_thread(launcher.start_opensearch, args.work_dir / "opensearch")
        url = backend.url
    alias = f"engram-bench-v{CORPUS_VERSION}-{args.chunks}-{args.spaces}"
    try:
        keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0, timeout_seconds=60)
        await keyword.open()
        try:
            if not await keyword.search([space_ref(0).id], "the", limit=1):
                started = time.perf_counter()
                await load_keyword(corpus, keyword, concurrency=8)
                print(f"loaded OpenSearch in {time.perf_counter() - started:.1f} s")
        finally:
            await keyword.close()
        del corpus  # not kept alive by this frame while the measurements run
        yield url, alias
    finally:
        if backend is not None:
            await asyncio.to_thread(backend.stop)


async def run_real(args: argparse.Namespace, data_dir: Path, url: str, alias: str) -> None:
    queries = Queries(seed=2)
    keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0)
    rows, components = await measure_in_process(keyword, data_dir, args, queries)
    print_rows("OpenSearch + embedded vectors, service layer", rows, components)
    if ensure_ghz() is None:
        print("ghz needs Go to build (go install from the Go module proxy): no gRPC figures")
        return
    port = free_port()
    command = [
        sys.executable,
        str(SELF),
        "serve-real",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--opensearch-url",
        url,
        "--alias",
        alias,
    ]
    log = args.work_dir / "server-real.log"
    async with server_process(command, server_env(), log, port) as addr:
        rows = await asyncio.to_thread(ghz_rows, addr, args, queries, args.work_dir)
    print_rows("OpenSearch + embedded vectors, gRPC (`search_on_backends`)", rows, [])


async def serve_real(args: argparse.Namespace) -> None:
    """The production composition, with the embedded vector index in place of a Qdrant
    server (none can be had here)."""
    from engram.app.production import search_on_backends
    from engram.runtime.server import stop_on_signals
    from engram.runtime.settings import Settings

    settings = Settings(
        grpc_port=args.port,
        opensearch_url=args.opensearch_url,
        opensearch_index=args.alias,
        opensearch_replicas=0,
    )
    vector = NumpyVectorIndex(args.data_dir / "vectors")
    stop = asyncio.Event()
    async with search_on_backends(
        settings, vector=vector, authenticator=FixedPrincipalAuthenticator(LOCAL_ADMIN)
    ):
        stop_on_signals(stop.set)
        await stop.wait()


# --- search across cores: `engram serve search --workers N` ---------------------------------


def cpu_flags() -> str:
    """The CPU model and the flags that matter to the model's kernels, from /proc/cpuinfo."""
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    listed = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    flags = set(listed.group(1).split()) if listed else set()
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_int8")
    found = " ".join(flag for flag in wanted if flag in flags)
    return f"{model.group(1) if model else '?'}, {os.cpu_count()} CPUs, {found}"


async def embedding_ceiling(queries: Queries, count: int) -> tuple[float, float]:
    """(raw model CPU ms per query, QPS ceiling = cores x 1000 / that): distinct queries one
    at a time through search's query embedder settings, CPU time of this process."""
    embedder = LocalOnnxEmbedder(threads=1, query_window=0.0, query_max_batch=1)
    try:
        await embedder.embed_query("warm up")
        texts = queries.take(count)
        started = time.process_time()
        for text in texts:
            await embedder.embed_query(text)
        cpu_ms = (time.process_time() - started) / count * 1000
    finally:
        embedder.close()
    return cpu_ms, (os.cpu_count() or 1) * 1000 / cpu_ms


def hybrid_messages(args: argparse.Namespace, queries: Queries, count: int) -> list[Any]:
    sets = space_sets(args.spaces, 1, count, seed=300 + count)
    return [
        {
            "spaces": [{"visibility": "VISIBILITY_PRIVATE", "name": r.name} for r in refs],
            "query": text,
            "limit": LIMIT,
            "mode": PROTO_MODES[SearchMode.HYBRID],
        }
        for text, refs in zip(queries.take(count), sets, strict=True)
    ]


@dataclass(frozen=True)
class WorkersRow:
    """One `--workers N` run: latency at c=1, QPS at c=16, and where the CPU went then."""

    workers: int
    p50: float
    p99: float
    qps: float
    cpu: CpuWindow
    server_pid: int

    def per_query(self, seconds: float) -> float:
        """CPU ms per query of the loaded window."""
        return seconds * 1000 / (self.qps * self.cpu.elapsed)

    @property
    def server_ms(self) -> float:
        return self.per_query(self.cpu.of_tree(self.server_pid))


def workers_row(
    addr: str, args: argparse.Namespace, queries: Queries, token: str, server: int
) -> tuple[float, float, float, CpuWindow]:
    """(hybrid p50 ms at c=1, p99, QPS at c=16, the CPU of that window), one distinct query
    per call; ghz opens 16 connections, since the kernel spreads connections (not calls)
    over the workers."""
    extra = ["--metadata", json.dumps({"authorization": f"Bearer {token}"})]
    data = args.work_dir / f"ghz-workers-{server}.json"
    data.write_text(json.dumps(hybrid_messages(args, queries, 60)))
    run_ghz(addr, data, 60, 16, args.time_cap, [*extra, "--connections", "16"])  # warm-up
    data.write_text(json.dumps(hybrid_messages(args, queries, args.queries)))
    single = run_ghz(addr, data, args.queries, 1, args.time_cap, extra)
    latencies = sorted(d["latency"] / 1e6 for d in single["details"])
    data.write_text(json.dumps(hybrid_messages(args, queries, args.queries * 2)))
    with CpuWindow() as window:
        loaded = run_ghz(
            addr, data, args.queries * 2, 16, args.time_cap, [*extra, "--connections", "16"]
        )
    return percentile(latencies, 50), percentile(latencies, 99), float(loaded["rps"]), window


async def leg_latencies(
    url: str, alias: str, data_dir: Path, args: argparse.Namespace, queries: Queries
) -> dict[str, float]:
    """p50 ms at c=1 of each step of a one-space hybrid search, alone and in this process:
    the query embedding (search's embedder settings), BM25 top-50 on OpenSearch, and the
    shared vector directory's top-50 - what the latency target adds up."""
    embedder = search_embedder(Settings())
    keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0, timeout_seconds=60)
    vector = NumpyVectorIndex(data_dir / "vectors")
    await keyword.open()
    await vector.open()
    try:
        await embedder.embed_query("warm up")
        samples = await step_samples(keyword, vector, embedder, args, queries, (1,))
        return {
            name: percentile(samples[key], 50)
            for name, key in (("embed", "embed"), ("bm25", "bm25 1"), ("knn", "knn 1"))
        }
    finally:
        await keyword.close()
        await vector.close()
        embedder.close()


async def every_worker_ready(metrics_port: int, within: float) -> None:
    """Waits for the command's /readyz (200 once every worker is SERVING)."""
    import urllib.error
    import urllib.request

    def ready() -> bool:
        url = f"http://127.0.0.1:{metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    deadline = time.monotonic() + within
    while not await asyncio.to_thread(ready):
        if time.monotonic() > deadline:
            raise SystemExit(f"the search workers were not ready within {within:.0f} s")
        await asyncio.sleep(0.5)


async def run_workers(args: argparse.Namespace, data_dir: Path, url: str, alias: str) -> None:
    """Hybrid QPS at concurrency 16 through `engram serve search --workers N`, N = 1 and 2,
    against the embedding ceiling measured in the same run, with where the CPU went; and
    hybrid p50 at concurrency 1 against the steps it is made of."""
    if ensure_ghz() is None:
        raise SystemExit("the workers bench drives the servers with ghz, which needs Go to build")
    queries = Queries(seed=3)
    cpu_ms, ceiling = await embedding_ceiling(queries, 200)
    legs = await leg_latencies(url, alias, data_dir, args, queries)
    launcher = load_launcher()
    launcher.provision(["mongo"])
    mongo = await asyncio.to_thread(launcher.start_mongo, args.work_dir / "mongo")
    secret = "search-bench-" + "x" * 32
    token = bench_token(secret, sub="local-admin", tenant="local", role="admin")
    rows = []
    try:
        for workers in args.workers:
            port, metrics = free_port(), free_port()
            env = {
                **server_env(),
                "ENGRAM_METRICS_PORT": str(metrics),
                "ENGRAM_OPENSEARCH_URL": url,
                "ENGRAM_OPENSEARCH_INDEX": alias,
                "ENGRAM_OPENSEARCH_REPLICAS": "0",
                "ENGRAM_VECTOR_DIR": str(data_dir / "vectors"),
                "ENGRAM_MONGO_URI": mongo.url,
                "ENGRAM_JWT_SECRET": secret,
            }
            command = [sys.executable, "-m", "engram", "serve", "search"]
            command += ["--workers", str(workers), "--port", str(port)]
            log = args.work_dir / f"server-workers-{workers}.log"
            async with server_started(command, env, log, port) as server:
                await every_worker_ready(metrics, 180)
                row = await asyncio.to_thread(
                    workers_row, f"127.0.0.1:{port}", args, queries, token, server.pid
                )
            rows.append(WorkersRow(workers, *row, server_pid=server.pid))
    finally:
        await asyncio.to_thread(mongo.stop)
    print_workers(rows, cpu_ms, ceiling, legs)


def print_workers(
    rows: list[WorkersRow], cpu_ms: float, ceiling: float, legs: dict[str, float]
) -> None:
    cores = os.cpu_count() or 1
    print(f"\n### Search across cores ({cpu_flags()})\n")
    print(f"raw model CPU per query {cpu_ms:.2f} ms: embedding ceiling {ceiling:.0f} QPS")
    print(
        f"alone at c=1, p50: query embedding {legs['embed']:.2f} ms, BM25 top-50 (OpenSearch)"
        f" {legs['bm25']:.2f} ms, vector top-50 {legs['knn']:.2f} ms\n"
    )
    bound = legs["embed"] + max(legs["bm25"], legs["knn"])
    print(
        "| workers | hybrid p50 / p99 ms (c=1) | p50 / (embedding + slower leg) "
        "| hybrid QPS (c=16) | QPS / ceiling |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.workers} | {row.p50:.1f} / {row.p99:.1f} | {row.p50 / bound:.2f} "
            f"| {row.qps:.0f} | {row.qps / ceiling:.2f} |"
        )
    print(
        "\nCPU ms per query at c=16, by process, and the cores busy (of "
        f"{cores}); the last column is the search processes' own ratio: raw model CPU per "
        "query over their CPU per query (1.0 = they spend nothing but the model)\n"
    )
    print("| workers | search | OpenSearch (JVM) | ghz | rest | cores busy | search's own |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        window = row.cpu
        server, jvm, ghz = (
            row.server_ms,
            row.per_query(window.of_name("java")),
            row.per_query(window.reaped),
        )
        rest = row.per_query(window.busy) - server - jvm - ghz
        print(
            f"| {row.workers} | {server:.2f} | {jvm:.2f} | {ghz:.2f} | {rest:.2f} "
            f"| {window.cores_busy:.2f} | {cpu_ms / server:.2f} |"
        )


def print_rows(title: str, rows: list[Row], components: list[Row]) -> None:
    print(f"\n### {title}\n")
    print("| spaces | mode | p50 ms (c=1) | p99 ms (c=1) | QPS (c=16) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if components:
        print("\n| step alone (c=1) | p50 ms | p99 ms |")
        print("|---|---|---|")
        for row in components:
            print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


async def embedder_contention() -> None:
    """Query embedding latency while the indexer embeds documents: through the indexer's own
    embedder (one inference thread, batches of 32) versus search's own instance."""
    indexer = LocalOnnxEmbedder()
    own = LocalOnnxEmbedder(threads=1)
    await indexer.embed_query("warm up")
    await own.embed_query("warm up")
    chunk = (
        "The agent noted the deploy of the service and what the review said about error "
        "budgets, retries and the on-call rota for the week. "
    ) * 4
    rows = []
    try:
        for name, embedder in (("the indexer's embedder", indexer), ("search's own", own)):

            async def indexing() -> None:
                for batch in range(6):
                    texts = [f"{chunk[:480]} {batch}-{i}" for i in range(32)]
                    await indexer.embed_documents(texts)

            busy = asyncio.create_task(indexing())
            await asyncio.sleep(0.05)
            latencies = []
            for i in range(10):
                started = time.perf_counter()
                await embedder.embed_query(f"what happened with deploy {i}")
                latencies.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(0.05)
            await busy
            rows.append((name, f"{percentile(latencies, 50):.0f}", f"{max(latencies):.0f}"))
    finally:
        indexer.close()
        own.close()
    print("\n| query embedded by, during indexing | p50 ms | max ms |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "command",
        nargs="?",
        default="bench",
        choices=("bench", "serve-real", "contention", "workers"),
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="`workers`: the counts to run"
    )
    parser.add_argument("--target", choices=("embedded", "real", "both"), default="embedded")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1000, help="calls per c=1 row")
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per row")
    parser.add_argument(
        "--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "engram-search-bench"
    )
    # serve-real (the server process of --target real)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--opensearch-url")
    parser.add_argument("--alias")
    args = parser.parse_args()
    if args.command == "serve-real":
        await serve_real(args)
        return
    if args.command == "contention":
        await embedder_contention()
        return
    corpus, data_dir = await prepare(args)
    async with contextlib.AsyncExitStack() as stack:
        if args.target in ("real", "both") or args.command == "workers":
            url, alias = await stack.enter_async_context(opensearch_loaded(args, corpus))
        # 100k Chunk objects would make every full garbage collection of this process
        # (the service-layer client) cost tens of milliseconds: measure without them.
        del corpus
        gc.collect()
        gc.freeze()
        if args.command == "workers":
            await run_workers(args, data_dir, url, alias)
            return
        if args.target in ("embedded", "both"):
            await run_embedded(args, data_dir)
        if args.target in ("real", "both"):
            await run_real(args, data_dir, url, alias)


if __name__ == "__main__":
    asyncio.run(main())
