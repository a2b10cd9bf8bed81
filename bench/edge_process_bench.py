"""What running Qdrant Edge in its own process costs and buys (EdgeVectorIndex, issue 33).

    python bench/edge_process_bench.py                      # 20,000 points of 384 dims
    python bench/edge_process_bench.py --points 5000 --queries 200
    python bench/edge_process_bench.py --max-segment-kb 8000   # a bounded segment size

Two identical corpora are written unoptimized (synthetic unit vectors: a topic vector plus
noise, spread over --spaces spaces, one of them holding 10 %). Then, on the same data:

* in process - the earlier adapter's way: the shard opened in this process and every engine
  call run with `asyncio.to_thread` (the functions are the engine process's own,
  `engram.indexes.vector.edge_host`);
* engine process - `EdgeVectorIndex` as `engram dev` runs it, the shard in a child process.

For each: the optimize (HNSW build) time and this process's event-loop lag while it runs (an
asyncio task sleeping 5 ms, its largest and p99 gap), how many one-space searches sent every
50 ms during the optimize were answered within 1 s (SearchService's backend timeout), then
p50/p99 of one-space semantic search at concurrency 1 once built. Every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import percentile

from engram.domain.chunks import Chunk, ModelInfo, chunk_id
from engram.domain.scoping import path_scopes
from engram.indexes.vector import edge_host
from engram.indexes.vector.edge_host import SHARD_DIR, Where
from engram.indexes.vector.edge_index import EDGE_DIR, EdgeTuning, EdgeVectorIndex
from engram.indexes.vector.paths import collection_dir_name
from engram.indexes.vector.points import chunk_of, payload, point_id

MODEL = ModelInfo("bench-384", 384)
TOPICS = 200
SEED = 20261203


def corpus(points: int, spaces: int) -> tuple[list[str], np.ndarray, list[dict[str, Any]]]:
    rng = np.random.default_rng(SEED)
    topics = rng.standard_normal((TOPICS, MODEL.dimension)).astype(np.float32)
    topic_of = rng.integers(0, TOPICS, points)
    vectors = topics[topic_of] + 0.9 * rng.standard_normal((points, MODEL.dimension))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids, payloads = [], []
    for n in range(points):
        # Space 0 holds every tenth point; the others share the rest.
        space = 0 if n % 10 == 0 else 1 + n % (spaces - 1)
        path = f"notes/d{n // 10}.md"
        chunk = Chunk(
            chunk_id=chunk_id(f"doc-{n // 10}", n % 10),
            document_id=f"doc-{n // 10}",
            space_id=f"s{space}",
            tenant="bench",
            path=path,
            chunk_index=n % 10,
            doc_version=1,
            content=f"chunk {n} of topic {topic_of[n]}",
        )
        ids.append(point_id(chunk.chunk_id))
        payloads.append(payload(chunk, path_scopes(path)))
    return ids, vectors, payloads


async def write_unoptimized(root: Path, tuning: EdgeTuning, data: Any) -> None:
    index = EdgeVectorIndex(root, tuning=replace(tuning, optimize_delay_seconds=1e9))
    await index.open()
    try:
        await index.ensure_collection(MODEL)
        await index.activate(MODEL.model_id)
        ids, vectors, payloads = data
        for start in range(0, len(ids), 4096):
            end = start + 4096
            await index.import_points(
                MODEL.model_id, ids[start:end], vectors[start:end], payloads[start:end]
            )
    finally:
        await index.close()


@contextlib.asynccontextmanager
async def loop_lag() -> AsyncIterator[list[float]]:
    """The gaps (ms) between wake-ups of a task sleeping 5 ms while the block runs."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append((now - last) * 1000)
            last = now

    task = asyncio.create_task(tick())
    try:
        yield gaps
    finally:
        done.set()
        await task


async def probe_during(
    work: Awaitable[Any], search: Callable[[], Awaitable[Any]]
) -> tuple[float, list[float], int, int]:
    """Runs `work` while searching every 50 ms (1 s timeout each): its seconds, the loop's
    gaps, searches answered and timed out."""
    answered = timed_out = 0
    running = asyncio.ensure_future(work)

    async def prober() -> None:
        nonlocal answered, timed_out
        while not running.done():
            try:
                async with asyncio.timeout(1.0):
                    await search()
                answered += 1
            except TimeoutError:
                timed_out += 1
            await asyncio.sleep(0.05)

    started = time.perf_counter()
    async with loop_lag() as gaps:
        probing = asyncio.create_task(prober())
        await running
        took = time.perf_counter() - started
        await probing
    return took, gaps, answered, timed_out


async def latencies(search: Callable[[np.ndarray], Awaitable[Any]], queries: np.ndarray) -> Any:
    found = []
    for query in queries:
        started = time.perf_counter()
        await search(query)
        found.append((time.perf_counter() - started) * 1000)
    return found


async def in_process(root: Path, tuning: EdgeTuning, queries: np.ndarray) -> dict[str, Any]:
    """The earlier adapter's way: the shard in this process, calls in a worker thread."""
    shard_dir = str(root / EDGE_DIR / collection_dir_name(MODEL.model_id) / SHARD_DIR)
    await asyncio.to_thread(edge_host.load, MODEL.model_id, shard_dir, MODEL.dimension, tuning)

    async def search(query: np.ndarray, space: str = "s1") -> list[Any]:
        rows = await asyncio.to_thread(
            edge_host.search,
            MODEL.model_id,
            query,
            Where((space,)),
            10,
            tuning,
        )
        return [(chunk_of(fields), score) for score, fields in rows]

    try:
        optimize = asyncio.to_thread(edge_host.optimize, MODEL.model_id)
        took, gaps, answered, timed_out = await probe_during(optimize, lambda: search(queries[0]))
        found = await latencies(search, queries)
    finally:
        await asyncio.to_thread(edge_host.close, MODEL.model_id)
    return summary("in process", took, gaps, answered, timed_out, found)


async def engine_process(root: Path, tuning: EdgeTuning, queries: np.ndarray) -> dict[str, Any]:
    index = EdgeVectorIndex(root, tuning=replace(tuning, optimize_delay_seconds=1e9))
    await index.open()

    async def search(query: np.ndarray) -> Any:
        return await index.search(["s1"], query, limit=10)

    try:
        took, gaps, answered, timed_out = await probe_during(
            index.optimize(), lambda: search(queries[0])
        )
        found = await latencies(search, queries)
    finally:
        await index.close()
    return summary("engine process", took, gaps, answered, timed_out, found)


def summary(
    name: str, took: float, gaps: list[float], answered: int, timed_out: int, found: list[float]
) -> dict[str, Any]:
    return {
        "where": name,
        "optimize_s": took,
        "loop_ticks": len(gaps),
        "loop_max_gap_ms": max(gaps, default=took * 1000),
        "loop_p99_gap_ms": percentile(gaps, 99) if gaps else took * 1000,
        "searches_during_optimize_answered": answered,
        "searches_during_optimize_timed_out": timed_out,
        "search_p50_ms": statistics.median(found),
        "search_p99_ms": percentile(found, 99),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--spaces", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--max-segment-kb", type=int, default=None)
    args = parser.parse_args()
    tuning = replace(EdgeTuning(), max_segment_size_kb=args.max_segment_kb)
    data = corpus(args.points, args.spaces)
    rng = np.random.default_rng(SEED + 1)
    queries = data[1][rng.integers(0, args.points, args.queries)] + 0.05
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    work = Path(tempfile.mkdtemp(prefix="edge-process-bench-"))
    try:
        roots = work / "a", work / "b"
        for root in roots:
            await write_unoptimized(root, tuning, data)
        print(
            f"{args.points:,} points x {MODEL.dimension} over {args.spaces} spaces, "
            f"max_segment_size_kb {args.max_segment_kb}",
            file=sys.stderr,
        )
        for result in (
            await in_process(roots[0], tuning, queries),
            await engine_process(roots[1], tuning, queries),
        ):
            print(
                f"{result['where']:15} optimize {result['optimize_s']:6.2f} s | loop: "
                f"{result['loop_ticks']} ticks, max gap {result['loop_max_gap_ms']:8.0f} ms, "
                f"p99 {result['loop_p99_gap_ms']:6.1f} ms | searches during it: "
                f"{result['searches_during_optimize_answered']} answered, "
                f"{result['searches_during_optimize_timed_out']} timed out (1 s) | "
                f"semantic 1 space p50 {result['search_p50_ms']:.2f} ms, "
                f"p99 {result['search_p99_ms']:.2f} ms"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
