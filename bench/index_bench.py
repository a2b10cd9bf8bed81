"""Indexer benchmark (issue 5): chunks/s embedded and indexed, and freshness - the time from
a write being acknowledged to its chunks being visible in both indexes.

    python bench/index_bench.py                         # embedded, then real backends
    python bench/index_bench.py --target embedded       # `engram dev`'s parts in-process
    python bench/index_bench.py --target real --vector numpy

embedded: the all-in-one server (SQLite outbox -> relay -> worker -> tantivy + the embedded
vector index, local model), written to through its StorageService.
real: `engram serve storage` as its own process on FerretDB, publishing to NATS JetStream;
the indexer (`open_indexer`, as `engram serve indexer` builds it) in this process reading
documents back through StorageService, writing OpenSearch and the vector index (Qdrant
local mode, or the embedded index at a directory with `--vector numpy`). NATS, FerretDB
and OpenSearch are started fresh from deploy/local and stopped after (`--reuse-backends`
takes ENGRAM_TEST_* instead).

Besides wall-clock rates it prints the CPU time every process of the pipeline used per
chunk (this process, the storage process, and the backends it started), which says what the
pipeline would do with the machine to itself when other jobs share the cores.

Raw model cost, in the same run and before anything else starts: the onnxruntime session
alone (the embedder's own session options: one intra-op thread; inputs tokenized
beforehand) on the benchmark's chunk texts at batch 1 and batch 32 (and batch 32 with two
intra-op threads, the session engram used before), and on query texts at batch 1: CPU ms
per text (process CPU time, which includes onnxruntime's threads). The pipeline's CPU per
chunk (and, on the embedded target, per query) is then printed as a multiple of it. The
machine's CPU flags are printed first, since absolute figures depend on them (AVX-512 VNNI
runs the int8 model much faster).

Throughput: `--docs` documents of 4 chunks (~430 distinct characters each, so every chunk
is embedded) written by 8 writers as fast as the store takes them, after one warm-up
document, while the indexer is paused (the embedded relay stopped, the real consumer
stopped); then the indexer is resumed on that backlog and timed alone, from resuming to
the last chunk indexed, CPU included. Queries (embedded
target): `--queries` distinct semantic searches through gRPC at concurrency 1, then as many
at concurrency 16: QPS and CPU per query (the gRPC client is in this process too). Freshness:
`--samples` writes of documents of 1-4 chunks, one at a time (`--pause` between them), each
followed by polling both indexes (every 5 ms) until they hold that version. Every loop is
bounded by a count and a deadline.

Writes and queries go through engram.client with its retries off and a 30 s deadline, one
attempt per call as the figures assume (a retry's backoff would count as the pipeline's time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import bench_token, free_port, load_launcher, new_events_consumer, percentile
from prometheus_client import REGISTRY

from engram.client import AsyncClient, Space
from engram.domain.chunking import chunk_text
from engram.indexer.embedders.local import (
    default_model_path,
    default_tokenizer_path,
    load_tokenizer,
    open_session,
)
from engram.indexes.ports import KeywordIndex, VectorIndex
from engram.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
SPACE = Space(visibility="private", name="bench")
# Each write's and query's deadline; one attempt each (see the docstring).
CALL_TIMEOUT = 30.0
SPACE_ID_LOCAL = "v1:private:local::::bench"
SPACE_ID_REAL = "v1:private:bench::::bench"
SECRET = "index-bench-secret-0123456789abcdef0123456789"
WRITERS = 8
POLL_SECONDS = 0.005

WORDS = (
    "the of and to in a is that for it as was with be by on not this are or from at which "
    "agent memory service deploy server error request build release test data index search "
    "query document space note daily log team project user model vector chunk token review "
    "meeting plan design issue fix update config cluster node shard replica backup restore "
    "schedule report metric alert incident budget latency owner rollback billing retry"
).split()


class Corpus:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def paragraph(self) -> str:
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 420:
            words.append(self.rng.choice(WORDS))
        return " ".join(words) + ".\n\n"

    def document(self, chunks: int) -> str:
        text = "".join(self.paragraph() for _ in range(chunks))
        assert len(chunk_text(text)) == chunks
        return text


def query_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10)))


def cpu_flags() -> str:
    """The CPU's vector extensions (AVX, AVX-512, VNNI), which decide the model's speed."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return " ".join(sorted(f for f in flags if f.startswith("avx") or "vnni" in f))
    except OSError:
        pass
    return "unknown"


@dataclass(frozen=True)
class RawCost:
    """CPU ms per text of the onnxruntime session alone."""

    batch1_ms: float
    batch32_ms: float
    batch32_two_threads_ms: float
    batch32_two_callers_ms: float
    query_ms: float
    tokenize_ms: float
    # Two callers kept at it for `sustained_seconds` (raw_model_cost's argument), if asked.
    sustained_two_callers_ms: float | None = None
    sustained_seconds: float = 0

    def report(self) -> str:
        return (
            f"raw model (onnxruntime session alone, one intra-op thread as the embedder runs "
            f"it), CPU per text: chunks at batch 1 {self.batch1_ms:.2f} ms, at batch 32 "
            f"{self.batch32_ms:.2f} ms (with two intra-op threads "
            f"{self.batch32_two_threads_ms:.2f} ms; from two threads at once on the one-thread "
            f"session, as the indexer's two embed threads run it, "
            f"{self.batch32_two_callers_ms:.2f} ms); queries at batch 1 {self.query_ms:.2f} "
            f"ms; tokenizing a chunk {self.tokenize_ms:.3f} ms"
            + (
                f"; two threads at once for {self.sustained_seconds:.0f} s, both cores busy "
                f"throughout: {self.sustained_two_callers_ms:.2f} ms per chunk"
                if self.sustained_two_callers_ms is not None
                else ""
            )
        )


def raw_model_cost(
    chunks: list[str], queries: list[str], *, max_length: int, sustained_seconds: float = 0
) -> RawCost:
    """The model's own cost: session.run on inputs tokenized beforehand, CPU time of this
    process (nothing else runs in it yet) per text. Each figure is the best of 3 rounds."""
    import numpy as np

    tokenizer = load_tokenizer(default_tokenizer_path(), max_length)

    def feeds(texts: list[str], names: set[str]) -> dict[str, Any]:
        encodings = tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            out["token_type_ids"] = np.zeros_like(ids)
        return out

    def per_text(session: Any, batches: list[dict[str, Any]], texts: int) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            for batch in batches:
                session.run(None, batch)
            best = min(best, (time.process_time() - started) / texts * 1000)
        return best

    started = time.process_time()
    for text in chunks:
        tokenizer.encode(text)
    tokenize_ms = (time.process_time() - started) / len(chunks) * 1000

    session = open_session(default_model_path(), 1)
    names = {i.name for i in session.get_inputs()}
    singles = [feeds([text], names) for text in chunks]
    per_text(session, singles[:8], 8)  # warm-up: allocator, kernels
    batch1 = per_text(session, singles, len(chunks))
    # Sorted by length, as the embedder does, so a batch pads to little more than its longest.
    ordered = sorted(chunks, key=lambda text: len(tokenizer.encode(text).ids))
    batched = [feeds(ordered[i : i + 32], names) for i in range(0, len(ordered), 32)]
    batch32 = per_text(session, batched, len(chunks))
    query_feeds = [feeds([text], names) for text in queries]
    per_text(session, query_feeds[:8], 8)
    query_ms = per_text(session, query_feeds, len(queries))
    two = open_session(default_model_path(), 2)
    per_text(two, batched[:1], 32)
    batch32_two = per_text(two, batched, len(chunks))
    batch32_callers = two_callers(session, batched, len(chunks))
    sustained = (
        two_callers(session, batched, len(chunks), sustained_seconds=sustained_seconds)
        if sustained_seconds > 0
        else None
    )
    return RawCost(
        batch1,
        batch32,
        batch32_two,
        batch32_callers,
        query_ms,
        tokenize_ms,
        sustained,
        sustained_seconds,
    )


def two_callers(
    session: Any, batches: list[dict[str, Any]], texts: int, *, sustained_seconds: float = 0
) -> float:
    """CPU ms per text with two threads calling `session.run` at once, each on every other
    batch: how the indexer's embed threads (ENGRAM_EMBED_THREADS, default 2) share one
    single-thread session, so both cores run the model as in a bulk load. Best of 3 rounds;
    with `sustained_seconds`, the mean over rounds repeated for that long instead, both
    cores busy throughout (as in a load of many minutes, where the cores' clocks and caches
    settle lower than in a few seconds' burst)."""
    import concurrent.futures

    def run(part: list[dict[str, Any]]) -> None:
        for batch in part:
            session.run(None, batch)

    best = float("inf")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        if sustained_seconds > 0:
            rounds = 0
            started, wall = time.process_time(), time.monotonic()
            while rounds < 3 or time.monotonic() - wall < sustained_seconds:
                list(pool.map(run, [batches[0::2], batches[1::2]]))
                rounds += 1
            return (time.process_time() - started) / (texts * rounds) * 1000
        for _ in range(3):
            started = time.process_time()
            list(pool.map(run, [batches[0::2], batches[1::2]]))
            best = min(best, (time.process_time() - started) / texts * 1000)
    return best


def cpu_seconds(pids: Iterable[int] = (), groups: Iterable[int] = ()) -> float:
    """User + system CPU seconds of this process, of `pids`, and of every process in the
    process groups `groups` (a backend and its children)."""
    own = os.times()
    total = own.user + own.system
    wanted, wanted_groups = set(pids), set(groups)
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) in wanted or int(fields[2]) in wanted_groups:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms, "
        f"max {max(ms):.0f} ms, mean {statistics.fmean(ms):.0f} ms (n={len(ms)})"
    )


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


@dataclass
class Target:
    """What the measurements need from a running system."""

    name: str
    # The server's StorageService (and SearchService on the embedded target), as the
    # bench's caller, in SPACE.
    client: AsyncClient
    keyword: KeywordIndex
    vector: VectorIndex
    space_id: str
    idle: Callable[[], Awaitable[bool]]
    embedded_texts: Callable[[], int]
    # CPU seconds used so far by every process of the pipeline under test.
    cpu: Callable[[], float]
    # The model's own cost, measured before the run.
    raw: RawCost
    # Stop and resume consuming events, to measure the indexer alone on a backlog.
    pause: Callable[[], Awaitable[None]] | None = None
    resume: Callable[[], Awaitable[None]] | None = None
    # Whether the same server answers SearchService (the embedded target): query figures.
    searches: bool = False


async def visible(target: Target, path: str, version: int, chunks: int) -> bool:
    held = await target.keyword.chunks_of(target.space_id, path)
    if len(held) != chunks or any(c.doc_version != version for c in held):
        return False
    vectors = await target.vector.chunks_of(target.space_id, path)
    return len(vectors) == chunks and all(c.doc_version == version for c in vectors)


async def wait_visible(target: Target, path: str, version: int, chunks: int) -> float:
    deadline = time.monotonic() + 60
    while not await visible(target, path, version, chunks):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} v{version} not visible after 60 s")
        await asyncio.sleep(POLL_SECONDS)
    return time.perf_counter()


async def write(target: Target, path: str, content: str) -> int:
    written = await target.client.write_document(path, content)
    return written.document.version


async def throughput(target: Target, corpus: Corpus, docs: int) -> None:
    chunks_before = counter("engram_indexer_chunks_indexed_total")
    embedded_before = target.embedded_texts()
    contents = [corpus.document(4) for _ in range(docs)]
    queue = list(enumerate(contents))
    if target.pause is not None:
        await target.pause()
    started = time.perf_counter()

    async def writer() -> None:
        while queue:
            number, content = queue.pop()
            await write(target, f"load/{number:05d}.md", content)

    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    written = time.perf_counter() - started
    cpu_before = target.cpu()
    if target.resume is not None:
        # A backlog of `docs` events waits in the stream: from here on only the indexer runs.
        started = time.perf_counter()
        await target.resume()
    deadline = time.monotonic() + 1200
    while counter("engram_indexer_chunks_indexed_total") - chunks_before < docs * 4 or not (
        await target.idle()
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("the load was not indexed within 20 minutes")
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    cpu = target.cpu() - cpu_before
    indexed = counter("engram_indexer_chunks_indexed_total") - chunks_before
    embedded = target.embedded_texts() - embedded_before
    print(
        f"[{target.name}] throughput: {docs} docs x 4 chunks written in {written:.1f} s "
        f"({docs / written:.0f} docs/s); indexed in {elapsed:.1f} s: "
        f"{embedded / elapsed:.1f} chunks/s embedded, {indexed / elapsed:.1f} chunks/s indexed "
        f"(embedded {embedded:.0f}, indexed {indexed:.0f})",
        flush=True,
    )
    per_chunk = cpu / indexed
    cores = os.cpu_count() or 1
    print(
        f"[{target.name}]   CPU of the pipeline's processes: {cpu:.1f} s = "
        f"{per_chunk * 1000:.0f} ms per chunk, {cpu / elapsed:.2f} cores busy on average; "
        f"with all {cores} cores: at most {cores / per_chunk:.0f} chunks/s",
        flush=True,
    )
    raw = target.raw
    print(
        f"[{target.name}]   = {per_chunk * 1000 / raw.batch32_ms:.2f}x the raw model at batch 32 "
        f"({raw.batch32_ms:.2f} ms), {per_chunk * 1000 / raw.batch1_ms:.2f}x at batch 1 "
        f"({raw.batch1_ms:.2f} ms), {per_chunk * 1000 / raw.batch32_two_threads_ms:.2f}x at "
        f"batch 32 on two intra-op threads ({raw.batch32_two_threads_ms:.2f} ms), "
        f"{per_chunk * 1000 / raw.batch32_two_callers_ms:.2f}x at batch 32 from two threads "
        f"at once ({raw.batch32_two_callers_ms:.2f} ms)",
        flush=True,
    )


async def queries(target: Target, count: int) -> None:
    """Distinct semantic searches (the query cache never answers): QPS and CPU per query at
    concurrency 1 and 16, as a multiple of the raw model's batch-1 cost of a query."""
    if not target.searches:
        return
    rng = random.Random(11)
    for concurrency in (1, 16):
        texts = [query_text(rng) + f" q{concurrency}x{n}" for n in range(count)]
        pending = list(reversed(texts))
        deadline = time.monotonic() + 120

        async def client(pending: list[str] = pending, deadline: float = deadline) -> None:
            while pending and time.monotonic() < deadline:
                await target.client.search(pending.pop(), limit=10, mode="semantic")

        cpu_before = target.cpu()
        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        done = count - len(pending)
        per_query = (target.cpu() - cpu_before) / done * 1000
        print(
            f"[{target.name}] semantic queries at concurrency {concurrency}: {done} in "
            f"{elapsed:.1f} s = {done / elapsed:.0f} QPS; CPU {per_query:.2f} ms per query = "
            f"{per_query / target.raw.query_ms:.2f}x the raw model's query at batch 1 "
            f"({target.raw.query_ms:.2f} ms)",
            flush=True,
        )


async def freshness(target: Target, corpus: Corpus, samples: int, pause: float) -> None:
    lags: dict[int, list[float]] = {n: [] for n in range(1, 5)}
    for number in range(samples):
        chunks = 1 + number % 4
        path = f"fresh/{number % 25:02d}.md"
        content = corpus.document(chunks)
        version = await write(target, path, content)
        acked = time.perf_counter()
        lags[chunks].append(await wait_visible(target, path, version, chunks) - acked)
        await asyncio.sleep(pause)
    every = [lag for values in lags.values() for lag in values]
    print(f"[{target.name}] freshness, write acked -> visible in both: {summary(every)}")
    for chunks, values in lags.items():
        print(f"[{target.name}]   {chunks}-chunk documents: {summary(values)}", flush=True)


async def run(target: Target, args: argparse.Namespace) -> None:
    corpus = Corpus(args.seed)
    # Loads the model and opens every connection before anything is timed.
    await wait_visible(target, "warmup.md", await write(target, "warmup.md", corpus.document(2)), 2)
    await freshness(target, corpus, args.samples, args.pause)
    await throughput(target, corpus, args.docs)
    await queries(target, args.queries)


# --- embedded ------------------------------------------------------------------------------


async def embedded(args: argparse.Namespace, workdir: Path, raw: RawCost) -> None:
    from engram.app.embedded import embedded_engram
    from engram.app.parts import Indexing
    from engram.storage.sqlite_outbox import SqliteOutbox

    settings = Settings(
        data_dir=workdir / "engram",
        grpc_port=0,
        metrics_port=0,
        access_log=False,
        log_level="WARNING",
        # Its embedding backfill would index the paused backlog behind the bench's back.
        maintenance_schedule=False,
    )
    async with embedded_engram(settings) as engram:
        indexing = engram.indexing
        assert isinstance(indexing, Indexing)
        outbox = SqliteOutbox(engram.database)

        async def idle() -> bool:
            return await outbox.backlog() == 0

        async def pause() -> None:
            # The events stay in the outbox; the relay publishes them when started again.
            await engram.relay.stop(drain_seconds=0)

        async def resume() -> None:
            engram.relay.start()

        async with AsyncClient(
            f"127.0.0.1:{engram.port}", space=SPACE, retries=0, timeout=CALL_TIMEOUT
        ) as client:
            await run(
                Target(
                    "embedded",
                    client,
                    indexing.keyword,
                    indexing.vector,
                    SPACE_ID_LOCAL,
                    idle,
                    lambda: indexing.embedder.embedded_texts,
                    cpu_seconds,
                    raw,
                    pause,
                    resume,
                    searches=True,
                ),
                args,
            )


# --- real backends -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def real_backends(
    workdir: Path, *, reuse: bool
) -> AsyncIterator[tuple[dict[str, str], list[int]]]:
    """(URLs, process groups of the backends started here). Fresh backends from deploy/local
    unless `reuse`, which takes ENGRAM_TEST_* (their CPU is then not counted)."""
    if reuse:
        names = {"nats": "NATS_URL", "mongo": "MONGO_URI", "opensearch": "OPENSEARCH_URL"}
        yield {name: os.environ[f"ENGRAM_TEST_{var}"] for name, var in names.items()}, []
        return
    launcher = load_launcher()
    launcher.provision(["nats", "mongo", "opensearch"])
    started = []
    try:
        for name in ("nats", "mongo", "opensearch"):
            started.append(getattr(launcher, f"start_{name}")(workdir / name))
        yield {b.name: b.url for b in started}, [b.pid for b in started]
    finally:
        for running in started:
            running.stop()


async def real(args: argparse.Namespace, workdir: Path, raw: RawCost) -> None:
    from engram.app.production import open_indexer

    run_id = uuid.uuid4().hex[:8]
    async with real_backends(workdir, reuse=args.reuse_backends) as (urls, groups):
        storage_port = free_port()
        common = {
            "ENGRAM_MONGO_URI": urls["mongo"],
            "ENGRAM_MONGO_DB": f"index_bench_{run_id}",
            "ENGRAM_NATS_URL": urls["nats"],
            "ENGRAM_JWT_SECRET": SECRET,
            "ENGRAM_METRICS_PORT": "0",
            "ENGRAM_ACCESS_LOG": "false",
            "ENGRAM_LOG_LEVEL": "WARNING",
        }
        command = [sys.executable, "-m", "engram", "serve", "storage", "--port", str(storage_port)]

        def spawn() -> subprocess.Popen[bytes]:
            with open(workdir / "storage.log", "ab") as log:
                return subprocess.Popen(command, env={**os.environ, **common}, stderr=log)

        storage_process = await asyncio.to_thread(spawn)
        vector: dict[str, Any] = (
            {"vector_dir": workdir / "vectors"}
            if args.vector == "numpy"
            else {"qdrant_path": workdir / "qdrant"}
        )
        settings = Settings(
            mongo_uri=urls["mongo"],
            mongo_db=common["ENGRAM_MONGO_DB"],
            nats_url=urls["nats"],
            jwt_secret=SECRET,
            opensearch_url=urls["opensearch"],
            opensearch_index=f"bench{run_id}-chunks",
            opensearch_replicas=0,
            storage_addr=f"127.0.0.1:{storage_port}",
            service_token=bench_token(SECRET, sub="indexer", service=True),
            indexer_durable=f"bench-{run_id}",
            grpc_port=0,
            metrics_port=0,
            access_log=False,
            log_level="WARNING",
            **vector,
        )
        try:
            await new_events_consumer(urls["nats"], settings.indexer_durable)
            bearer = bench_token(SECRET, sub="bench", tenant="bench", role="member")
            async with AsyncClient(
                f"127.0.0.1:{storage_port}",
                token=bearer,
                space=SPACE,
                retries=0,
                timeout=CALL_TIMEOUT,
            ) as client:
                await client.wait_ready(30)
                async with open_indexer(settings) as indexer:

                    async def idle() -> bool:
                        return await indexer.consumer.backlog() == 0

                    await run(
                        Target(
                            f"real/{args.vector}",
                            client,
                            indexer.keyword,
                            indexer.vector,
                            SPACE_ID_REAL,
                            idle,
                            lambda: indexer.embedder.embedded_texts,
                            lambda: cpu_seconds([storage_process.pid], groups),
                            raw,
                            indexer.consumer.stop,
                            indexer.consumer.start,
                        ),
                        args,
                    )
                    await _cleanup(urls, settings)
        finally:
            storage_process.terminate()
            await asyncio.to_thread(storage_process.wait, 20)


async def _cleanup(urls: dict[str, str], settings: Settings) -> None:
    """Drops what the run created in the shared backends."""
    import nats
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[urls["opensearch"]])
    try:
        await client.indices.delete(index=f"{settings.opensearch_index}-*")
    finally:
        await client.close()
    connection = await nats.connect(urls["nats"])
    try:
        await connection.jetstream().delete_consumer("ENGRAM_DOCS", settings.indexer_durable)
    finally:
        await connection.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=["embedded", "real", "all"], default="all")
    parser.add_argument("--vector", choices=["qdrant-local", "numpy"], default="qdrant-local")
    parser.add_argument("--docs", type=int, default=150, help="throughput documents (x4 chunks)")
    parser.add_argument("--samples", type=int, default=200, help="freshness writes")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between them")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--queries", type=int, default=200, help="searches per concurrency")
    parser.add_argument(
        "--reuse-backends",
        action="store_true",
        help="use ENGRAM_TEST_* backends instead of fresh ones (their CPU is not counted)",
    )
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()}", flush=True)
    print(f"CPU flags: {cpu_flags()}", flush=True)
    settings = Settings()
    corpus = Corpus(args.seed + 1)
    rng = random.Random(args.seed + 2)
    raw = await asyncio.to_thread(
        raw_model_cost,
        [corpus.paragraph().strip() for _ in range(128)],
        [query_text(rng) for _ in range(128)],
        max_length=settings.embed_max_length,
    )
    print(raw.report(), flush=True)
    with tempfile.TemporaryDirectory(prefix="index-bench-") as workdir:
        if args.target in ("embedded", "all"):
            await embedded(args, Path(workdir) / "embedded", raw)
        if args.target in ("real", "all"):
            (Path(workdir) / "real").mkdir()
            await real(args, Path(workdir) / "real", raw)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
