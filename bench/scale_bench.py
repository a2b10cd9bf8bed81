"""The scale curve: search latency and memory of the embedded backends at 10k, 100k, 1M chunks.

    python bench/scale_bench.py                                # 10k and 100k chunks
    python bench/scale_bench.py --sizes 10000 100000 1000000   # and 1M (~3 GiB of RSS)
    python bench/scale_bench.py check                          # fast loader == the adapters
    python bench/scale_bench.py --profile                      # + a cProfile of each size
    python bench/scale_bench.py scan                           # the vector scan kernel alone
    python bench/scale_bench.py indexing                       # 1 and 2 `engram serve indexer`

For each size a child process loads the corpus (once per --work-dir, reused after), then a
fresh child process opens the embedded indexes exactly as `engram dev` does
(TantivyKeywordIndex + NumpyVectorIndex under SearchService, in process: no gRPC) and
measures, one client at a time, p50/p99 of lexical, semantic and hybrid search over three
kinds of scope, then hybrid QPS at concurrency 8, and reports the process's RSS (before
opening, after opening, after the searches, and the peak) and the time to open. Qdrant Edge
runs in a process of its own (EdgeVectorIndex), whose RSS is reported apart.

Corpus (deterministic, seeded): N/1000 spaces; space 0 - "the big space" - holds 10 % of
the chunks, the others share the rest with lognormal sizes (the median one holds ~800
chunks at every N). Chunks of 40-80 words, 10 per document: ~70 % of a chunk's words come
from its topic (one of 2,000 topics, 25 words each), the rest from a Zipf-distributed
5,000-word vocabulary; ~5 % carry an identifier like ERR_4021. Scopes searched: one typical
space, four typical spaces, the big space.

Vectors are synthetic, not the model's: a chunk's vector is its topic's random unit vector
plus Gaussian noise, normalised (384 dimensions, like the default model). A query is 3
words of one topic and its vector the topic's vector plus less noise, so both legs find the
topic's chunks. The query embedder of the bench returns that vector in microseconds: the
figures are the indexes' and the service's cost; the real model adds ~9 ms of CPU per query
embedding (bench/index_bench.py) on top, whatever the corpus size.

The fast loader writes both indexes directly: tantivy documents built by the adapter's own
schema and document functions through one IndexWriter, and the vector collection's SQLite
file (the adapter's schema, alias and layout) with executemany - not chunk by chunk through
replace_chunks, which would take hours at 1M. `check` loads a small corpus both ways and
asserts that every search returns the same hits.

Every loop is bounded by a count and a time cap. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tantivy
from benchlib import bench_token, load_launcher, new_events_consumer, percentile, process_cpu
from memory_cap import MemoryCap, memory_cap

from engram.authz.enforcement import PolicyAuthorizer
from engram.domain.chunks import Chunk, ModelInfo, chunk_id
from engram.domain.principals import LOCAL_ADMIN
from engram.domain.scoping import path_scopes
from engram.domain.spaces import SpaceRef, Visibility
from engram.indexes.keyword import tantivy_index
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import Embedder, Vectors
from engram.indexes.vector import numpy_index
from engram.indexes.vector.edge_index import EdgeTuning, EdgeVectorIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.indexes.vector.points import payload, point_id
from engram.search.errors import SearchUnavailable
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchMode, SearchQuery, SearchService

SELF = Path(__file__).resolve()
ROOT = SELF.parents[1]
SEED = 20261201
# Bump when the corpus recipe changes: a loaded corpus is reused per version and size.
CORPUS_VERSION = 1
DIMENSION = 384
MODEL = ModelInfo("bench-synthetic-384", DIMENSION)
CHUNKS_PER_DOCUMENT = 10
CHUNKS_PER_SPACE = 1000
BIG_SPACE_SHARE = 0.10
TOPICS = 2000
TOPIC_WORDS = 25
VOCABULARY = 5000
WORDS_PER_CHUNK = (40, 80)
TOPIC_SHARE = 0.7
CHUNK_NOISE = 0.9
QUERY_NOISE = 0.5
LIMIT = 10
MODES = (SearchMode.LEXICAL, SearchMode.SEMANTIC, SearchMode.HYBRID)
# Rows of the loader's batches (bounded memory at any size).
LOAD_BATCH_SPACES = 64
ENGINES = ("edge", "numpy")
# Search-time settings of the Edge curve: (hnsw_ef, oversampling), on one built index.
EF_CURVE = ((16, 2.0), (32, 1.0), (32, 2.0), (64, 1.0), (64, 2.0), (96, 2.0), (128, 2.0))
RECALL_QUERIES = 200

COMMON = """the of and to in a is that for it as was with be by on not this are or from at
which but have an they you were she there been one all we their has would when what if will
so no more out up said about some can its into them only time than other new could these two
may first then do any like now over such our even most made after also did many before must
through back years where much your way well down should because each just those people how
""".split()
SYLLABLES = "ka to ri mo sa lu ne vi po da ge xi bo fu ha je ly ru te wo an el".split()


# --- the corpus ---------------------------------------------------------------------------------


def vocabulary(rng: random.Random) -> list[str]:
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def space_ref(number: int) -> SpaceRef:
    return SpaceRef(Visibility.PRIVATE, LOCAL_ADMIN.tenant, f"s{number:05d}")


@dataclass(frozen=True)
class Layout:
    """How `chunks` chunks are spread over spaces; the same for a size at every run."""

    chunks: int
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, chunks: int) -> Layout:
        rng = np.random.default_rng(SEED)
        spaces = max(10, chunks // CHUNKS_PER_SPACE)
        big = int(chunks * BIG_SPACE_SHARE)
        weights = rng.lognormal(0.0, 0.6, spaces - 1)
        rest = np.maximum(
            (weights / weights.sum() * (chunks - big)).astype(int), CHUNKS_PER_DOCUMENT
        )
        rest[np.argmax(rest)] += chunks - big - int(rest.sum())
        return cls(chunks, (big, *(int(size) for size in rest)))

    def typical_spaces(self) -> list[int]:
        """Spaces other than the big one, within a factor of 2 of the median size."""
        median = statistics.median(self.sizes[1:])
        return [n for n, size in enumerate(self.sizes) if n and median / 2 <= size <= median * 2]


class Vocab:
    """The words, topics and vectors every run derives from SEED."""

    def __init__(self) -> None:
        rng = random.Random(SEED)
        self.words = vocabulary(rng)
        self.word_array = np.array(self.words, dtype=object)
        nrng = np.random.default_rng(SEED)
        zipf = 1.0 / (np.arange(VOCABULARY) + 1.0)
        self.background = zipf / zipf.sum()
        # A topic's words are rarer words (not the common head of the vocabulary).
        self.topic_words = nrng.integers(len(COMMON), VOCABULARY, size=(TOPICS, TOPIC_WORDS))
        topic_vectors = nrng.standard_normal((TOPICS, DIMENSION)).astype(np.float32)
        self.topic_vectors = topic_vectors / np.linalg.norm(topic_vectors, axis=1, keepdims=True)


def corpus_batches(
    layout: Layout, vocab: Vocab, spaces: Sequence[int] | None = None
) -> Iterator[tuple[list[Chunk], np.ndarray]]:
    """(chunks, unit vectors) of LOAD_BATCH_SPACES spaces at a time, deterministic per space."""
    numbers = list(range(len(layout.sizes))) if spaces is None else list(spaces)
    for start in range(0, len(numbers), LOAD_BATCH_SPACES):
        chunks: list[Chunk] = []
        vectors: list[np.ndarray] = []
        for number in numbers[start : start + LOAD_BATCH_SPACES]:
            space_chunks, space_vectors = space_corpus(number, layout.sizes[number], vocab)
            chunks.extend(space_chunks)
            vectors.append(space_vectors)
        yield chunks, np.concatenate(vectors)


def space_corpus(number: int, size: int, vocab: Vocab) -> tuple[list[Chunk], np.ndarray]:
    rng = np.random.default_rng([SEED, number])
    ref = space_ref(number)
    space_id = ref.id
    topics = rng.integers(0, TOPICS, size=size)
    lengths = rng.integers(WORDS_PER_CHUNK[0], WORDS_PER_CHUNK[1] + 1, size=size)
    total = int(lengths.sum())
    from_topic = rng.random(total) < TOPIC_SHARE
    background = rng.choice(VOCABULARY, size=total, p=vocab.background)
    owner = np.repeat(topics, lengths)
    topical = vocab.topic_words[owner, rng.integers(0, TOPIC_WORDS, size=total)]
    words = vocab.word_array[np.where(from_topic, topical, background)]
    identifiers = rng.random(size) < 0.05
    codes = rng.integers(1000, 9999, size=size)
    noise = rng.standard_normal((size, DIMENSION)).astype(np.float32) * (
        CHUNK_NOISE / np.sqrt(DIMENSION)
    )
    vectors = vocab.topic_vectors[topics] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    chunks = []
    offset = 0
    for i in range(size):
        doc = i // CHUNKS_PER_DOCUMENT
        document_id = f"scale-{number:05d}-{doc:05d}"
        text = " ".join(words[offset : offset + lengths[i]])
        offset += int(lengths[i])
        if identifiers[i]:
            text += f" ERR_{codes[i]}"
        chunks.append(
            Chunk(
                chunk_id=chunk_id(document_id, i % CHUNKS_PER_DOCUMENT),
                document_id=document_id,
                space_id=space_id,
                tenant=ref.tenant,
                path=f"notes/d{doc % 50:02d}/doc-{doc:05d}.md",
                chunk_index=i % CHUNKS_PER_DOCUMENT,
                doc_version=1,
                content=text,
            )
        )
    return chunks, vectors


# --- the fast loader ----------------------------------------------------------------------------


class EdgeSink:
    """The Edge loader: points straight into the adapter's shard (`import_points`), on one
    event loop kept across batches; `build` runs the optimizer (HNSW, quantization)."""

    def __init__(self, root: Path, tuning: EdgeTuning) -> None:
        self._runner = asyncio.Runner()
        # The background optimizer waits for `build`: the load is timed apart from it.
        self._index = EdgeVectorIndex(root, tuning=replace(tuning, optimize_delay_seconds=1e9))
        self._runner.run(self._start())

    async def _start(self) -> None:
        await self._index.open()
        await self._index.ensure_collection(MODEL)
        await self._index.activate(MODEL.model_id)

    def add(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        ids = [point_id(c.chunk_id) for c in chunks]
        payloads = [payload(c, path_scopes(c.path)) for c in chunks]
        for start in range(0, len(ids), 4096):
            end = start + 4096
            self._runner.run(
                self._index.import_points(
                    MODEL.model_id, ids[start:end], vectors[start:end], payloads[start:end]
                )
            )

    def build(self) -> float:
        started = time.perf_counter()
        self._runner.run(self._index.optimize())
        built = time.perf_counter() - started
        self._runner.run(self._index.close())
        self._runner.close()
        return built


def edge_tuning(args: argparse.Namespace) -> EdgeTuning:
    """The adapter's defaults, or the graph settings given on the command line."""
    defaults = EdgeTuning()
    return replace(
        defaults,
        m=args.m or defaults.m,
        payload_m=args.m or defaults.payload_m,
        ef_construct=args.ef_construct or defaults.ef_construct,
    )


def fast_load(
    layout: Layout, data_dir: Path, engine: str = "numpy", tuning: EdgeTuning | None = None
) -> dict[str, float]:
    """Writes both embedded indexes of `layout` under data_dir (keyword/, vectors/)."""
    vocab = Vocab()
    shutil.rmtree(data_dir, ignore_errors=True)
    keyword_dir = data_dir / "keyword"
    keyword_dir.mkdir(parents=True)
    index = tantivy.Index(tantivy_index._schema(), path=str(keyword_dir))
    (keyword_dir / tantivy_index._MARKER).write_text(
        json.dumps({"schema_version": tantivy_index.SCHEMA_VERSION}) + "\n"
    )
    index.register_tokenizer(tantivy_index._IDENT_TOKENIZER, tantivy_index._ident_analyzer())
    writer = index.writer(heap_size=200_000_000, num_threads=1)

    vector_root = data_dir / "vectors"
    edge = EdgeSink(vector_root, tuning or EdgeTuning()) if engine == "edge" else None
    collection = (
        vector_root / numpy_index.COLLECTIONS_DIR / numpy_index.collection_dir_name(MODEL.model_id)
    )
    collection.mkdir(parents=True)
    database = sqlite3.connect(collection / numpy_index.DATABASE_FILE)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("PRAGMA synchronous=OFF")
    database.executescript(numpy_index.SCHEMA)
    database.execute(
        "INSERT INTO collection_info (singleton, model_id, dimension) VALUES (1, ?, ?)",
        (MODEL.model_id, MODEL.dimension),
    )
    database.commit()
    (vector_root / numpy_index.ALIAS_FILE).write_text(json.dumps({"engram-chunks": MODEL.model_id}))

    timings = {"generate": 0.0, "keyword": 0.0, "vector": 0.0}
    loaded = 0
    uncommitted = 0
    batches = corpus_batches(layout, vocab)
    while True:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            break
        chunks, vectors = batch
        generated = time.perf_counter()
        timings["generate"] += generated - started
        for chunk in chunks:
            writer.add_document(tantivy_index._document(chunk))
        uncommitted += len(chunks)
        if uncommitted >= 250_000:
            writer.commit()
            uncommitted = 0
        keyword_done = time.perf_counter()
        timings["keyword"] += keyword_done - generated
        loaded += len(chunks)
        if edge is not None:
            edge.add(chunks, vectors)
            timings["vector"] += time.perf_counter() - keyword_done
            print(f"  loaded {loaded:,}/{layout.chunks:,} chunks", file=sys.stderr, flush=True)
            continue
        database.executemany(
            "INSERT INTO vector_chunks (space_id, path, chunk_index, chunk_id, document_id,"
            " tenant, doc_version, content, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    c.space_id,
                    c.path,
                    c.chunk_index,
                    c.chunk_id,
                    c.document_id,
                    c.tenant,
                    c.doc_version,
                    c.content,
                    vectors[i].astype("<f4").tobytes(),
                )
                for i, c in enumerate(chunks)
            ),
        )
        database.commit()
        timings["vector"] += time.perf_counter() - keyword_done
        print(f"  loaded {loaded:,}/{layout.chunks:,} chunks", file=sys.stderr, flush=True)
    started = time.perf_counter()
    writer.commit()
    writer.wait_merging_threads()
    database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    database.close()
    timings["keyword"] += time.perf_counter() - started
    if edge is not None:
        # The empty legacy collection written above is not part of an Edge corpus.
        shutil.rmtree(vector_root / numpy_index.COLLECTIONS_DIR)
        timings["vector_build"] = edge.build()
    return timings


async def adapter_load(layout: Layout, data_dir: Path) -> None:
    """The same corpus through the adapters' replace_chunks (what `check` compares with)."""
    shutil.rmtree(data_dir, ignore_errors=True)
    vocab = Vocab()
    keyword = TantivyKeywordIndex(data_dir / "keyword")
    vector = NumpyVectorIndex(data_dir / "vectors")
    await keyword.open()
    await vector.open()
    try:
        await vector.ensure_collection(MODEL)
        await vector.activate(MODEL.model_id)
        for chunks, vectors in corpus_batches(layout, vocab):
            by_path: dict[tuple[str, str], list[int]] = {}
            for i, chunk in enumerate(chunks):
                by_path.setdefault((chunk.space_id, chunk.path), []).append(i)
            writes = []
            for (space_id, path), rows in by_path.items():
                picked = [chunks[i] for i in rows]
                writes.append(keyword.replace_chunks(space_id, path, picked))
                writes.append(
                    vector.replace_chunks(MODEL.model_id, space_id, path, picked, vectors[rows])
                )
            await asyncio.gather(*writes)
    finally:
        await keyword.close()
        await vector.close()


# --- queries ------------------------------------------------------------------------------------


class SyntheticQueryEmbedder:
    """The bench's query embedder: the vector of the topic a query was drawn from (module
    docstring). Unknown text raises: every query must come from `Queries`."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self._vectors = vectors

    @property
    def model(self) -> ModelInfo:
        return MODEL

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self._vectors[text] for text in texts])

    async def embed_query(self, text: str) -> Vectors:
        return self._vectors[text]


class Embedders:
    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    def for_model(self, model: ModelInfo) -> Embedder | None:
        return self._embedder if model.model_id == MODEL.model_id else None


class Queries:
    """Distinct query texts (3 words of a topic + a serial word) and their vectors."""

    def __init__(self, vocab: Vocab, seed: int) -> None:
        self._vocab = vocab
        self._rng = np.random.default_rng([SEED, seed])
        self.vectors: dict[str, np.ndarray] = {}
        self._serial = 0

    def next(self) -> str:
        topic = int(self._rng.integers(0, TOPICS))
        picks = self._rng.choice(TOPIC_WORDS, size=3, replace=False)
        self._serial += 1
        # The serial makes each text distinct, so no cache ever answers a repeat.
        text = " ".join(self._vocab.words[int(w)] for w in self._vocab.topic_words[topic, picks])
        text = f"{text} q{self._serial}"
        noise = self._rng.standard_normal(DIMENSION).astype(np.float32) * (
            QUERY_NOISE / np.sqrt(DIMENSION)
        )
        vector = self._vocab.topic_vectors[topic] + noise
        self.vectors[text] = vector / np.linalg.norm(vector)
        return text


def scopes(layout: Layout) -> dict[str, list[list[SpaceRef]]]:
    """Per scope kind, 64 space lists to cycle through."""
    rng = random.Random(SEED)
    typical = layout.typical_spaces()
    return {
        "1 space": [[space_ref(rng.choice(typical))] for _ in range(64)],
        "4 spaces": [[space_ref(n) for n in rng.sample(typical, 4)] for _ in range(64)],
        "big space": [[space_ref(0)] for _ in range(64)],
    }


# --- measuring ----------------------------------------------------------------------------------


def memory(pid: int | str = "self") -> dict[str, float]:
    """A process's (this one's by default) resident and peak resident memory, MiB."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return {
        "rss_mib": values["VmRSS"],
        "peak_mib": values["VmHWM"],
        "anon_mib": values["RssAnon"],
        "file_mib": values["RssFile"],
    }


def engine_memory(pid: int | None) -> dict[str, float] | None:
    """The vector engine's own process's memory, if it has one."""
    return None if pid is None else memory(pid)


def page_in(directory: Path) -> None:
    for path in sorted(directory.iterdir()):
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


async def timed(
    service: SearchService,
    queries: list[SearchQuery],
    *,
    concurrency: int,
    cap: float,
    errors: list[str],
) -> tuple[list[float], float]:
    """Latencies (ms) of up to len(queries) searches at `concurrency`, for at most `cap` s;
    a search that failed or answered degraded (a leg over its 1 s deadline) adds to
    `errors`, its latency counted all the same."""
    latencies: list[float] = []
    position = 0
    deadline = time.perf_counter() + cap

    async def worker() -> None:
        nonlocal position
        while position < len(queries) and time.perf_counter() < deadline:
            query = queries[position]
            position += 1
            started = time.perf_counter()
            try:
                outcome = await service.search(LOCAL_ADMIN, query)
            except SearchUnavailable as error:
                errors.append(error.message)
            else:
                if outcome.degraded:
                    errors.append("; ".join(outcome.degraded_reasons))
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def full_gc_ms() -> float:
    """The median pause of three full garbage collections, ms."""
    pauses = []
    for _ in range(3):
        started = time.perf_counter()
        gc.collect()
        pauses.append((time.perf_counter() - started) * 1000)
    return statistics.median(pauses)


def result_header(args: argparse.Namespace, layout: Layout) -> dict[str, Any]:
    """What a measurement was of: the size, the engine and its graph, the space sizes."""
    return {
        "chunks": args.chunks,
        "spaces": len(layout.sizes),
        "engine": args.engine,
        "graph": f"m {args.m or EdgeTuning().m} ef_construct "
        f"{args.ef_construct or EdgeTuning().ef_construct}"
        if args.engine == "edge"
        else "",
        "sizes": {
            "big": layout.sizes[0],
            "median": int(statistics.median(layout.sizes[1:])),
            "max_other": max(layout.sizes[1:]),
        },
    }


async def search_rows(
    service: SearchService, layout: Layout, queries: Queries, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """p50/p99 at concurrency 1 of every mode over every scope."""
    rows: list[dict[str, Any]] = []
    for kind, lists in scopes(layout).items():
        for mode in MODES:
            batch = [
                SearchQuery(
                    spaces=lists[i % len(lists)], text=queries.next(), limit=LIMIT, mode=mode
                )
                for i in range(args.count)
            ]
            errors: list[str] = []
            latencies, _ = await timed(service, batch, concurrency=1, cap=args.cap, errors=errors)
            rows.append(
                {
                    "scope": kind,
                    "mode": mode.value,
                    "n": len(latencies),
                    "errors": len(errors),
                    "p50_ms": percentile(latencies, 50),
                    "p99_ms": percentile(latencies, 99),
                }
            )
            print(f"  {kind:9} {mode.value:8} {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def cap_engine(
    args: argparse.Namespace, stack: contextlib.ExitStack, result: dict[str, Any]
) -> MemoryCap | None:
    """With --engine-memory-mib (Edge), a memory cgroup of that size for the engine."""
    if not args.engine_memory_mib or args.engine != "edge":
        return None
    result["engine_memory_cap_mib"] = args.engine_memory_mib
    name = f"engram-scale-{os.getpid()}"
    return stack.enter_context(memory_cap(args.engine_memory_mib, name))


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    layout = Layout.of(args.chunks)
    vocab = Vocab()
    data_dir = corpus_dir(args.work_dir, args.chunks, args.engine, (args.m, args.ef_construct))
    gc.collect()
    result = result_header(args, layout)
    result["memory_before_open"] = memory()
    # The keyword index's files are read once first, as a serving process finds them in the
    # page cache; the vector index reads its whole file at open anyway.
    await asyncio.to_thread(page_in, data_dir / "keyword")
    keyword = TantivyKeywordIndex(data_dir / "keyword")
    vector: NumpyVectorIndex | EdgeVectorIndex = (
        EdgeVectorIndex(data_dir / "vectors", tuning=edge_tuning(args))
        if args.engine == "edge"
        else NumpyVectorIndex(data_dir / "vectors")
    )
    capped = contextlib.ExitStack()
    cap = cap_engine(args, capped, result)
    started = time.perf_counter()
    await keyword.open()
    opened_keyword = time.perf_counter()
    # The engine's process (and the fork server it comes from) start inside the cap.
    with cap.holding(os.getpid()) if cap else contextlib.nullcontext():
        await vector.open()
    result["open_seconds"] = {
        "keyword": opened_keyword - started,
        "vector": time.perf_counter() - opened_keyword,
    }
    gc.collect()
    result["memory_after_open"] = memory()
    # Edge runs in a process of its own (EdgeVectorIndex): its memory is counted apart.
    engine_pid = await vector.engine_pid() if isinstance(vector, EdgeVectorIndex) else None
    result["engine_memory_after_open"] = engine_memory(engine_pid)
    # A full collection stops the event loop: what the resident index adds to it.
    result["full_gc_ms"] = full_gc_ms()
    profile = cProfile.Profile() if args.profile else None
    queries = Queries(vocab, seed=1)
    embedder = SyntheticQueryEmbedder(queries.vectors)
    service = SearchService(
        keyword,
        vector,
        Embedders(embedder),
        PolicyAuthorizer(),
        query_cache=QueryEmbeddingCache(1024),
    )
    rows: list[dict[str, Any]] = []
    try:
        # Warm up: the first searches page in the index files.
        warm = [SearchQuery(spaces=s, text=queries.next(), limit=LIMIT) for s in [[space_ref(0)]]]
        await timed(service, warm * 20, concurrency=1, cap=10, errors=[])
        if profile is not None:
            profile.enable()
        rows = await search_rows(service, layout, queries, args)
        lists = scopes(layout)["1 space"]
        batch = [
            SearchQuery(spaces=lists[i % len(lists)], text=queries.next(), limit=LIMIT)
            for i in range(args.count * 4)
        ]
        errors = []
        latencies, elapsed = await timed(service, batch, concurrency=8, cap=args.cap, errors=errors)
        result["recall"] = await recall_curve(vector, layout, vocab)
        result["hybrid_qps_c8"] = len(latencies) / elapsed
        result["hybrid_c8_errors"] = len(errors)
        result["hybrid_c8_p99_ms"] = percentile(latencies, 99)
        if profile is not None:
            profile.disable()
            path = args.work_dir / f"profile-{args.chunks}.pstats"
            profile.dump_stats(path)
            stats = pstats.Stats(str(path))
            stats.sort_stats("cumulative").print_stats(25)
            stats.sort_stats("tottime").print_stats(20)
    finally:
        result["memory_after_search"] = memory()
        result["engine_memory_after_search"] = engine_memory(engine_pid)
        if cap is not None:
            result["engine_cgroup"] = {"peak_mib": cap.peak_mib, "oom_kills": cap.oom_kills}
        await keyword.close()
        await vector.close()
        capped.close()
    result["rows"] = rows
    return result


async def recall_curve(
    vector: NumpyVectorIndex | EdgeVectorIndex, layout: Layout, vocab: Vocab
) -> list[dict[str, Any]]:
    """Big-space semantic search through the adapter (no SearchService): p50/p99 and
    recall@10 against exact search over the same vectors, per (hnsw_ef, oversampling) for
    Edge (its defaults last), once for the exact index."""
    chunks, vectors = space_corpus(0, layout.sizes[0], vocab)
    space_id = chunks[0].space_id
    queries = Queries(vocab, seed=3)
    for _ in range(RECALL_QUERIES):
        queries.next()
    matrix = np.stack(list(queries.vectors.values()))
    exact = np.argsort(-(matrix @ vectors.T), axis=1)[:, :LIMIT]
    truth = [{chunks[j].chunk_id for j in row} for row in exact]
    settings: list[tuple[int, float] | None] = [None]
    if isinstance(vector, EdgeVectorIndex):
        defaults = vector.tuning
        # The defaults last: ef by the space's size (0 in the row's hnsw_ef).
        settings = [*EF_CURVE, (0, defaults.oversampling)]
    rows = []
    for setting in settings:
        if setting is not None and isinstance(vector, EdgeVectorIndex):
            if setting[0]:
                vector.retune_search(hnsw_ef=setting[0], oversampling=setting[1])
            else:
                vector.restore_search_defaults(defaults)
        latencies, recalls = [], []
        for i, query in enumerate(matrix):
            started = time.perf_counter()
            hits = await vector.search([space_id], query, limit=LIMIT)
            latencies.append((time.perf_counter() - started) * 1000)
            recalls.append(len({h.chunk.chunk_id for h in hits} & truth[i]) / LIMIT)
        rows.append(
            {
                "hnsw_ef": setting[0] if setting else None,
                "oversampling": setting[1] if setting else None,
                "recall_at_10": float(np.mean(recalls)),
                "p50_ms": percentile(latencies, 50),
                "p99_ms": percentile(latencies, 99),
            }
        )
        print(f"  recall {rows[-1]}", file=sys.stderr, flush=True)
    return rows


# --- scan: the exact-search kernel alone ---------------------------------------------------------


def scan(rows_list: Sequence[int], repeats: int) -> None:
    """p50/p99 of scoring one query against `rows` unit vectors, by kernel, at 1 and 2
    concurrent threads: numpy's matmul (BLAS, with whatever threads OpenBLAS starts; run
    with OPENBLAS_NUM_THREADS=1 to see it single-threaded) and einsum (numpy's own loop)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(SEED)
    kernels = {
        "matmul": lambda m, q: m @ q,
        "einsum": lambda m, q: np.einsum("ij,j->i", m, q),
    }
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    for rows in rows_list:
        matrix = rng.standard_normal((rows, DIMENSION)).astype(np.float32)
        query = rng.standard_normal(DIMENSION).astype(np.float32)
        for name, kernel in kernels.items():
            for threads in (1, 2):

                def one(_: int, kernel: Any = kernel, m: Any = matrix, q: Any = query) -> float:
                    started = time.perf_counter()
                    kernel(m, q)
                    return (time.perf_counter() - started) * 1000

                with ThreadPoolExecutor(threads) as pool:
                    latencies = list(pool.map(one, range(repeats)))
                print(
                    f"{rows:>9,} rows  {name}  {threads} thread(s): p50 "
                    f"{percentile(latencies, 50):7.3f} ms  p99 {percentile(latencies, 99):7.3f} ms"
                )


# --- check: the fast loader writes what the adapters write --------------------------------------


async def check(work_dir: Path) -> None:
    layout = Layout.of(3000)
    fast, slow = work_dir / "check-fast", work_dir / "check-adapters"
    fast_load(layout, fast)
    await adapter_load(layout, slow)
    vocab = Vocab()
    answers: list[list[list[tuple[str, float]]]] = []
    for data_dir in (fast, slow):
        queries = Queries(vocab, seed=2)
        keyword = TantivyKeywordIndex(data_dir / "keyword")
        vector = NumpyVectorIndex(data_dir / "vectors")
        await keyword.open()
        await vector.open()
        service = SearchService(
            keyword, vector, Embedders(SyntheticQueryEmbedder(queries.vectors)), PolicyAuthorizer()
        )
        found = []
        try:
            for kind, lists in scopes(layout).items():
                for mode in MODES:
                    for i in range(10):
                        query = SearchQuery(
                            spaces=lists[i], text=queries.next(), limit=LIMIT, mode=mode
                        )
                        outcome = await service.search(LOCAL_ADMIN, query)
                        if not outcome.hits:
                            raise SystemExit(f"check: no hits for {kind} {mode} {query.text!r}")
                        found.append([(h.chunk.chunk_id, round(h.score, 5)) for h in outcome.hits])
        finally:
            await keyword.close()
            await vector.close()
        answers.append(found)
    if answers[0] != answers[1]:
        differing = sum(a != b for a, b in zip(*answers, strict=True))
        raise SystemExit(f"check FAILED: {differing}/{len(answers[0])} searches differ")
    print(f"check ok: {len(answers[0])} searches return the same hits from both loads")
    shutil.rmtree(fast)
    shutil.rmtree(slow)


# --- indexers: indexing throughput with 1 and 2 `engram serve indexer` processes ---------------

SECRET = "scale-bench-secret-0123456789abcdef0123456789"
INDEX_WRITERS = 8


def process_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def documents(count: int, seed: int) -> list[str]:
    """`count` documents of 4 chunks each (4 paragraphs of ~420 distinct characters)."""
    from engram.domain.chunking import chunk_text

    rng = random.Random(seed)
    words = Vocab().words
    texts = []
    for _ in range(count):
        paragraphs = []
        for _ in range(4):
            picked: list[str] = []
            while sum(len(w) + 1 for w in picked) < 420:
                picked.append(rng.choice(words))
            paragraphs.append(" ".join(picked) + ".")
        text = "\n\n".join(paragraphs) + "\n"
        if len(chunk_text(text)) != 4:
            raise RuntimeError("a bench document did not chunk into 4 chunks")
        texts.append(text)
    return texts


async def chunks_indexed(ports: Sequence[int]) -> list[float]:
    import httpx

    found = []
    async with httpx.AsyncClient(timeout=5) as client:
        for port in ports:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
            value = 0.0
            for line in response.text.splitlines():
                if line.startswith("engram_indexer_chunks_indexed_total "):
                    value = float(line.split()[1])
            found.append(value)
    return found


async def serving(port: int, deadline: float) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the process on port {port} is not SERVING")
            await asyncio.sleep(0.2)


def start_process(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            command, env={**os.environ, **env}, stdout=out, stderr=out, start_new_session=True
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


async def indexing_run(
    urls: dict[str, str], count: int, docs: int, work_dir: Path
) -> dict[str, Any]:
    """Writes `docs` documents while `count` indexers are stopped (SIGSTOP), then lets them
    consume the backlog and measures chunks/s and CPU per chunk."""
    import signal

    from engram.client import AsyncClient, Space

    run = f"scale{count}x{int(time.time())}"
    run_dir = work_dir / run
    run_dir.mkdir(parents=True)
    common = {
        "ENGRAM_MONGO_URI": urls["mongo"],
        "ENGRAM_MONGO_DB": run,
        "ENGRAM_NATS_URL": urls["nats"],
        "ENGRAM_JWT_SECRET": SECRET,
        "ENGRAM_ACCESS_LOG": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    await new_events_consumer(urls["nats"], run)
    storage_port = _free_port()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        processes.append(
            start_process(
                [sys.executable, "-m", "engram", "serve", "storage", "--port", str(storage_port)],
                {**common, "ENGRAM_METRICS_PORT": "0"},
                run_dir / "storage.log",
            )
        )
        await serving(storage_port, time.monotonic() + 180)
        indexer_env = {
            **common,
            "ENGRAM_OPENSEARCH_URL": urls["opensearch"],
            "ENGRAM_OPENSEARCH_INDEX": f"{run}-chunks",
            "ENGRAM_OPENSEARCH_REPLICAS": "0",
            "ENGRAM_STORAGE_ADDR": f"127.0.0.1:{storage_port}",
            "ENGRAM_SERVICE_TOKEN": bench_token(SECRET, sub="indexer", service=True),
            "ENGRAM_INDEXER_DURABLE": run,
            # Shared by the replicas (Qdrant local mode is one process per directory).
            "ENGRAM_VECTOR_DIR": str(run_dir / "vectors"),
        }
        metrics_ports = []
        indexers = []
        for number in range(count):
            grpc_port, metrics_port = _free_port(), _free_port()
            metrics_ports.append(metrics_port)
            indexer = start_process(
                [sys.executable, "-m", "engram", "serve", "indexer", "--port", str(grpc_port)],
                {**indexer_env, "ENGRAM_METRICS_PORT": str(metrics_port)},
                run_dir / f"indexer-{number}.log",
            )
            processes.append(indexer)
            indexers.append(indexer)
            # One after another: the first creates the shared vector directory.
            await serving(grpc_port, time.monotonic() + 300)
        # The writes are not timed (the indexers are stopped while they run): the client's
        # retries stay on; a replace repeated after UNAVAILABLE leaves the same document.
        async with AsyncClient(
            f"127.0.0.1:{storage_port}",
            token=bench_token(SECRET, sub="bench", tenant="bench", role="member"),
            space=Space(visibility="private", name="bench"),
            timeout=30,
        ) as storage:

            async def write(path: str, content: str) -> None:
                await storage.write_document(path, content)

            # Warm-up: every indexer has embedded something before the clock starts.
            warm = documents(4 * count, seed=count)
            await asyncio.gather(*(write(f"warm/{i}.md", t) for i, t in enumerate(warm)))
            deadline = time.monotonic() + 120
            while sum(await chunks_indexed(metrics_ports)) < 16 * count:
                if time.monotonic() > deadline:
                    raise TimeoutError("the warm-up documents were not indexed in 120 s")
                await asyncio.sleep(0.1)
            before = await chunks_indexed(metrics_ports)
            for indexer in indexers:
                os.killpg(indexer.pid, signal.SIGSTOP)
            queue = list(enumerate(documents(docs, seed=100 + count)))

            async def writer() -> None:
                while queue:
                    number, content = queue.pop()
                    await write(f"load/{number:05d}.md", content)

            await asyncio.gather(*(writer() for _ in range(INDEX_WRITERS)))
            target = sum(before) + 4 * docs
            cpu_before = [process_cpu(p.pid) for p in indexers]
            started = time.perf_counter()
            for indexer in indexers:
                os.killpg(indexer.pid, signal.SIGCONT)
            deadline = time.monotonic() + 600
            while sum(now := await chunks_indexed(metrics_ports)) < target:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{4 * docs} chunks not indexed within 600 s")
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
            cpu = [process_cpu(p.pid) - b for p, b in zip(indexers, cpu_before, strict=True)]
            rss = [process_rss_mib(p.pid) for p in indexers]
        share = [n - b for n, b in zip(now, before, strict=True)]
        return {
            "indexers": count,
            "chunks": 4 * docs,
            "seconds": elapsed,
            "chunks_per_second": 4 * docs / elapsed,
            "cpu_ms_per_chunk": sum(cpu) / (4 * docs) * 1000,
            "cores_busy": sum(cpu) / elapsed,
            "chunks_by_indexer": share,
            "indexer_rss_mib": rss,
        }
    finally:
        for process in reversed(processes):
            stop_process(process)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def indexing(args: argparse.Namespace) -> None:
    """NATS, FerretDB and OpenSearch from deploy/local (fresh, stopped after), or the
    ENGRAM_TEST_* URLs with --reuse-backends."""
    work_dir = args.work_dir / "indexers"
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    started: list[Any] = []
    try:
        if args.reuse_backends:
            names = {"nats": "NATS_URL", "mongo": "MONGO_URI", "opensearch": "OPENSEARCH_URL"}
            urls = {name: os.environ[f"ENGRAM_TEST_{var}"] for name, var in names.items()}
        else:
            launcher = load_launcher()
            launcher.provision(["nats", "mongo", "opensearch"])
            for name in ("nats", "mongo", "opensearch"):
                started.append(getattr(launcher, f"start_{name}")(work_dir / name))
            urls = {backend.name: backend.url for backend in started}
        results = []
        for count in args.indexers:
            result = await indexing_run(urls, count, args.docs, work_dir)
            print(json.dumps(result), flush=True)
            results.append(result)
        print()
        print("indexers  chunks  seconds  chunks/s  CPU ms/chunk  cores busy  chunks by indexer")
        for r in results:
            print(
                f"{r['indexers']:>8}  {r['chunks']:>6}  {r['seconds']:7.1f}  "
                f"{r['chunks_per_second']:8.1f}  {r['cpu_ms_per_chunk']:12.0f}  "
                f"{r['cores_busy']:10.2f}  {[int(n) for n in r['chunks_by_indexer']]}"
            )
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        for backend in started:
            backend.stop()


# --- the driver ---------------------------------------------------------------------------------


def corpus_dir(
    work_dir: Path, chunks: int, engine: str = "numpy", graph: tuple[int, int] = (0, 0)
) -> Path:
    suffix = "" if engine == "numpy" else f"-{engine}"
    if any(graph):
        suffix += f"-m{graph[0]}-efc{graph[1]}"
    return work_dir / f"corpus-v{CORPUS_VERSION}-{chunks}{suffix}"


def child(args: argparse.Namespace, command: str, chunks: int) -> dict[str, Any]:
    line = [sys.executable, str(SELF), command, "--chunks", str(chunks)]
    line += ["--work-dir", str(args.work_dir), "--count", str(args.count), "--cap", str(args.cap)]
    line += ["--engine", args.engine, "--m", str(args.m), "--ef-construct", str(args.ef_construct)]
    line += ["--engine-memory-mib", str(args.engine_memory_mib)]
    if args.profile:
        line.append("--profile")
    done = subprocess.run(line, stdout=subprocess.PIPE, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    for text in lines[:-1]:
        print(text)
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def ensure_loaded(args: argparse.Namespace, chunks: int) -> dict[str, Any] | None:
    marker = (
        corpus_dir(args.work_dir, chunks, args.engine, (args.m, args.ef_construct))
        / "bench-loaded.json"
    )
    if marker.exists():
        loaded: dict[str, Any] = json.loads(marker.read_text())
        return loaded
    return child(args, "load", chunks)


def disk_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def report(results: list[dict[str, Any]]) -> None:
    print()
    print(
        "chunks     spaces  big/median space  open s (kw/vec)  RSS MiB open/after/peak"
        "  disk  full GC"
    )
    for r in results:
        sizes, opened = r["sizes"], r["open_seconds"]
        before, after = r["memory_before_open"], r["memory_after_open"]
        end = r["memory_after_search"]
        print(
            f"{r['chunks']:>9,}  {r['spaces']:>6,}  {sizes['big']:>7,}/{sizes['median']:<7,}"
            f"  {opened['keyword']:5.2f}/{opened['vector']:6.2f}"
            f"   {before['rss_mib']:.0f} -> {after['rss_mib']:.0f}"
            f" / {end['rss_mib']:.0f} / {end['peak_mib']:.0f}"
            f"   disk {r.get('disk_mib', 0):.0f} MiB  {r['full_gc_ms']:.0f} ms"
        )
    print()
    header = "scope      mode     " + "".join(f"{r['chunks']:>22,}" for r in results)
    print(header + "   (p50 / p99 ms, concurrency 1)")
    for i, row in enumerate(results[0]["rows"]):
        cells = "".join(
            f"{r['rows'][i]['p50_ms']:>13.2f} / {r['rows'][i]['p99_ms']:<6.2f}" for r in results
        )
        failed = [r["rows"][i].get("errors", 0) for r in results]
        note = f"   errors {failed}" if any(failed) else ""
        print(f"{row['scope']:10} {row['mode']:8} {cells}{note}")
    cells = "".join(f"{r['hybrid_qps_c8']:>13.0f} / {r['hybrid_c8_p99_ms']:<6.1f}" for r in results)
    print(f"{'1 space':10} {'hybrid':8} {cells}   (QPS / p99 ms at concurrency 8)")
    print()
    print("big-space semantic search through the adapter, recall@10 against exact search:")
    for r in results:
        load = r.get("load") or {}
        after = r["memory_after_open"]
        print(
            f"{r['engine']} {r.get('graph', '')} {r['chunks']:,} chunks"
            f" (big space {r['sizes']['big']:,}): vector"
            f" open {r['open_seconds']['vector']:.2f} s, RSS after open anon/file"
            f" {after['anon_mib']:.0f}/{after['file_mib']:.0f} MiB, vector disk"
            f" {r.get('vector_disk_mib', 0):.0f} MiB, load {load.get('vector', 0):.1f} s,"
            f" build {load.get('vector_build', 0):.1f} s"
        )
        if r.get("engine_memory_after_open"):
            opened, end = r["engine_memory_after_open"], r["engine_memory_after_search"]
            print(
                f"   engine process RSS anon/file after open {opened['anon_mib']:.0f}/"
                f"{opened['file_mib']:.0f} MiB, after the searches {end['anon_mib']:.0f}/"
                f"{end['file_mib']:.0f} MiB, peak {end['peak_mib']:.0f} MiB"
            )
        if r.get("engine_cgroup"):
            cgroup = r["engine_cgroup"]
            print(
                f"   engine started in a cgroup of {r['engine_memory_cap_mib']} MiB:"
                f" peak {cgroup['peak_mib']:.0f} MiB, OOM kills {cgroup['oom_kills']}"
            )
        for row in r["recall"]:
            if row["hnsw_ef"] is None:
                setting = "exact      "
            elif row["hnsw_ef"] == 0:
                setting = f"default x{row['oversampling']:.0f} (ef by the space's size)"
            else:
                setting = f"ef {row['hnsw_ef']:>3} x{row['oversampling']:.0f}"
            print(
                f"   {setting}  recall@10 {row['recall_at_10']:.3f}"
                f"  p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "command",
        nargs="?",
        default="run",
        choices=("run", "check", "load", "measure", "scan", "indexing"),
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--chunks", type=int, default=0, help="(load/measure) the size")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "bench" / "out" / "scale")
    parser.add_argument("--count", type=int, default=200, help="searches per row")
    parser.add_argument("--cap", type=float, default=30.0, help="seconds per row at most")
    parser.add_argument("--profile", action="store_true", help="cProfile the searches")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--engine", choices=ENGINES, default="edge", help="the vector index")
    parser.add_argument("--m", type=int, default=0, help="(edge) HNSW m and payload_m")
    parser.add_argument("--ef-construct", type=int, default=0, help="(edge) HNSW ef_construct")
    parser.add_argument(
        "--engine-memory-mib",
        type=int,
        default=0,
        help="(edge) measure with the engine's process in a cgroup limited to this much memory",
    )
    parser.add_argument("--indexers", type=int, nargs="+", default=[1, 2], help="(indexing)")
    parser.add_argument("--docs", type=int, default=150, help="(indexing) 4-chunk documents")
    parser.add_argument(
        "--reuse-backends", action="store_true", help="(indexing) the ENGRAM_TEST_* backends"
    )
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.command == "indexing":
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        asyncio.run(indexing(args))
    elif args.command == "scan":
        scan([1_000, 4_000, 16_000, 100_000], args.count)
    elif args.command == "check":
        asyncio.run(check(args.work_dir))
    elif args.command == "load":
        started = time.perf_counter()
        data_dir = corpus_dir(args.work_dir, args.chunks, args.engine, (args.m, args.ef_construct))
        timings = fast_load(Layout.of(args.chunks), data_dir, args.engine, edge_tuning(args))
        loaded = {"load_seconds": time.perf_counter() - started, **timings, **memory()}
        (data_dir / "bench-loaded.json").write_text(json.dumps(loaded))
        print(json.dumps(loaded))
    elif args.command == "measure":
        print(json.dumps(asyncio.run(measure(args))))
    else:
        print(f"load average: {open('/proc/loadavg').read().strip()}")
        results = []
        for chunks in args.sizes:
            loaded = ensure_loaded(args, chunks)
            print(f"{chunks:,} chunks loaded: {loaded}")
            result = child(args, "measure", chunks)
            result["load"] = loaded
            vectors = (
                corpus_dir(args.work_dir, chunks, args.engine, (args.m, args.ef_construct))
                / "vectors"
            )
            result["disk_mib"] = disk_mib(
                corpus_dir(args.work_dir, chunks, args.engine, (args.m, args.ef_construct))
            )
            result["vector_disk_mib"] = disk_mib(vectors)
            results.append(result)
        report(results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
