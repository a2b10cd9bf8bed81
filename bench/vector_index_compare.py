"""Embedded vector index candidates, compared on space-filtered top-20 search (issue 5).

100,000 random unit vectors of 384 dimensions spread unevenly over 100 spaces; queries ask
for the top 20 of 1 or 4 random spaces. Candidates: NumpyVectorIndex through its async API
(the adapter engram ships), faiss IndexFlatIP + IDSelectorBatch, sqlite-vec with a
partition key, Qdrant local mode (on 20k points: it scans in Python), and hnswlib with a
filter (approximate: recall@20 against exact). Also: NumpyVectorIndex ingest, load from
disk and replace_chunks latency, and the local embedder's throughput.

    pip install -e '.[bench]'
    python bench/vector_index_compare.py            # everything, about 10 minutes
    python bench/vector_index_compare.py --quick    # smaller, for a smoke run

Every loop has a fixed count and every section a time cap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engram.domain.chunks import Chunk, ModelInfo
from engram.indexes.vector.numpy_index import NumpyVectorIndex

DIM = 384
TOP_K = 20
SECTION_SECONDS = 120.0
ROOT = Path(__file__).resolve().parents[1]
SCIFACT = Path(os.environ.get("ENGRAM_SCIFACT", "/work/shared/datasets/scifact/corpus.jsonl"))

Matrix = npt.NDArray[np.float32]


@dataclass
class Data:
    vectors: Matrix
    space_of: npt.NDArray[np.int64]
    rows_of_space: list[npt.NDArray[np.int64]]
    queries: Matrix
    one_space: list[list[int]]
    four_spaces: list[list[int]]


@dataclass
class Row:
    name: str
    p50_1: float = float("nan")
    p99_1: float = float("nan")
    p50_4: float = float("nan")
    p99_4: float = float("nan")
    recall: str = "exact"
    build: str = ""
    note: str = ""


def unit(rng: np.random.Generator, n: int) -> Matrix:
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    result: Matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return result


def make_data(total: int, spaces: int, queries: int, seed: int = 7) -> Data:
    rng = np.random.default_rng(seed)
    # Uneven sizes (log-normal) over a floor of chunks per space.
    floor = min(50, total // (2 * spaces))
    weights = rng.lognormal(0.0, 0.8, spaces)
    sizes = floor + np.floor(weights / weights.sum() * (total - floor * spaces)).astype(np.int64)
    sizes[int(np.argmax(sizes))] += total - int(sizes.sum())
    space_of = np.repeat(np.arange(spaces), sizes)
    rows_of_space = [np.flatnonzero(space_of == s) for s in range(spaces)]
    return Data(
        vectors=unit(rng, total),
        space_of=space_of,
        rows_of_space=rows_of_space,
        queries=unit(rng, queries),
        one_space=[[int(rng.integers(spaces))] for _ in range(queries)],
        four_spaces=[sorted(rng.choice(spaces, 4, replace=False).tolist()) for _ in range(queries)],
    )


def exact_top(data: Data, query: Matrix, spaces: Sequence[int]) -> set[int]:
    rows = np.concatenate([data.rows_of_space[s] for s in spaces])
    scores = data.vectors[rows] @ query
    return set(rows[np.argsort(-scores)[:TOP_K]].tolist())


def percentiles(samples: list[float]) -> tuple[float, float]:
    ms = sorted(1000 * s for s in samples)
    return statistics.median(ms), ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]


def timed(
    label: str, queries: int, run: Callable[[int, list[int]], object], data: Data
) -> tuple[tuple[float, float], tuple[float, float]]:
    out = []
    for spaces_list in (data.one_space, data.four_spaces):
        samples: list[float] = []
        deadline = time.perf_counter() + SECTION_SECONDS / 2
        for q in range(min(queries, len(spaces_list))):
            started = time.perf_counter()
            run(q, spaces_list[q])
            samples.append(time.perf_counter() - started)
            if time.perf_counter() > deadline:
                print(f"  {label}: time cap after {len(samples)} queries", file=sys.stderr)
                break
        out.append(percentiles(samples))
    return out[0], out[1]


# --- (a) NumpyVectorIndex -------------------------------------------------------------------


def chunks_for(space: int, doc: int, rows: npt.NDArray[np.int64]) -> list[Chunk]:
    space_id = f"space-{space}"
    path = f"notes/doc-{doc}.md"
    return [
        Chunk(f"d{space}-{doc}:{i}", f"d{space}-{doc}", space_id, "t", path, i, 1, f"chunk {row}")
        for i, row in enumerate(rows)
    ]


async def bench_numpy(data: Data, queries: int, workdir: Path) -> tuple[Row, dict[str, str]]:
    model = ModelInfo("bench", DIM)
    root = workdir / "numpy"
    index = NumpyVectorIndex(root)
    await index.open()
    await index.ensure_collection(model)
    await index.activate("bench")
    started = time.perf_counter()
    documents = 0
    for space, rows in enumerate(data.rows_of_space):
        for doc, start in enumerate(range(0, len(rows), 4)):
            part = rows[start : start + 4]
            chunks = chunks_for(space, doc, part)
            await index.replace_chunks(
                "bench", f"space-{space}", chunks[0].path, chunks, data.vectors[part]
            )
            documents += 1
    ingest = time.perf_counter() - started
    await index.close()

    started = time.perf_counter()
    index = NumpyVectorIndex(root)
    await index.open()
    load = time.perf_counter() - started

    async def run_all(spaces_list: list[list[int]]) -> list[float]:
        samples = []
        deadline = time.perf_counter() + SECTION_SECONDS / 2
        for q in range(min(queries, len(spaces_list))):
            ids = [f"space-{s}" for s in spaces_list[q]]
            started = time.perf_counter()
            await index.search(ids, data.queries[q], limit=TOP_K)
            samples.append(time.perf_counter() - started)
            if time.perf_counter() > deadline:
                break
        return samples

    await run_all(data.one_space[:20])  # warm-up
    one = percentiles(await run_all(data.one_space))
    four = percentiles(await run_all(data.four_spaces))

    # replace_chunks of a 4-chunk document into a ~1k-chunk and a ~5k-chunk space.
    rng = np.random.default_rng(11)
    replace: dict[str, str] = {}
    for size in (1_000, 5_000):
        space_id = f"replace-{size}"
        base = unit(rng, size)
        for doc in range(size // 4):
            chunks = [
                Chunk(f"r{doc}:{i}", f"r{doc}", space_id, "t", f"r/{doc}.md", i, 1, "x")
                for i in range(4)
            ]
            await index.replace_chunks(
                "bench", space_id, chunks[0].path, chunks, base[doc * 4 : doc * 4 + 4]
            )
        samples = []
        for n in range(300):
            doc = n % (size // 4)
            chunks = [
                Chunk(f"r{doc}:{i}", f"r{doc}", space_id, "t", f"r/{doc}.md", i, 2, "y")
                for i in range(4)
            ]
            started = time.perf_counter()
            await index.replace_chunks("bench", space_id, chunks[0].path, chunks, unit(rng, 4))
            samples.append(time.perf_counter() - started)
        p50, p99 = percentiles(samples)
        replace[f"{size}"] = f"{p50:.2f} / {p99:.2f} ms"
    await index.close()
    disk = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    row = Row(
        "NumpyVectorIndex (async API)",
        *one,
        *four,
        build=f"ingest {ingest:.1f} s ({documents} replace_chunks), load {load:.2f} s",
        note=f"{disk:.0f} MiB on disk",
    )
    return row, replace


# --- (b) faiss ------------------------------------------------------------------------------


def bench_faiss(data: Data, queries: int) -> Row:
    import faiss

    faiss.omp_set_num_threads(1)
    started = time.perf_counter()
    index = faiss.IndexIDMap(faiss.IndexFlatIP(DIM))
    index.add_with_ids(data.vectors, np.arange(len(data.vectors), dtype=np.int64))
    build = time.perf_counter() - started

    def run(q: int, spaces: list[int]) -> object:
        ids = np.concatenate([data.rows_of_space[s] for s in spaces])
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(ids))
        return index.search(data.queries[q : q + 1], TOP_K, params=params)

    one, four = timed("faiss", queries, run, data)
    return Row(
        "faiss IndexFlatIP + IDSelectorBatch (1 thread)", *one, *four, build=f"{build:.1f} s"
    )


# --- (c) sqlite-vec -------------------------------------------------------------------------


def bench_sqlite_vec(data: Data, queries: int, workdir: Path) -> Row:
    import sqlean
    import sqlite_vec

    path = workdir / "vec.sqlite3"
    connection = sqlean.connect(str(path))
    connection.enable_load_extension(True)
    sqlite_vec.load(connection)
    connection.execute(
        "CREATE VIRTUAL TABLE chunks USING vec0("
        f"space_id integer partition key, embedding float[{DIM}] distance_metric=cosine)"
    )
    started = time.perf_counter()
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO chunks(rowid, space_id, embedding) VALUES (?, ?, ?)",
        (
            (int(i), int(data.space_of[i]), data.vectors[i].tobytes())
            for i in range(len(data.vectors))
        ),
    )
    connection.execute("COMMIT")
    build = time.perf_counter() - started

    def run(q: int, spaces: list[int]) -> object:
        blob = data.queries[q].tobytes()
        hits: list[tuple[float, int]] = []
        # One partition per statement, merged: the partition key takes equality only.
        for space in spaces:
            hits.extend(
                (float(d), int(r))
                for r, d in connection.execute(
                    "SELECT rowid, distance FROM chunks WHERE embedding MATCH ? AND k = ?"
                    " AND space_id = ?",
                    (blob, TOP_K, space),
                )
            )
        return sorted(hits)[:TOP_K]

    one, four = timed("sqlite-vec", queries, run, data)
    connection.close()
    return Row("sqlite-vec vec0, partition key", *one, *four, build=f"{build:.1f} s")


# --- (d) Qdrant local mode ------------------------------------------------------------------


def bench_qdrant_local(data: Data, points: int, queries: int, workdir: Path) -> Row:
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    client = QdrantClient(path=str(workdir / "qdrant"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client.create_collection(
            "bench", vectors_config=qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
        )
        started = time.perf_counter()
        for start in range(0, points, 1000):
            stop = min(points, start + 1000)
            client.upsert(
                "bench",
                points=qm.Batch(
                    ids=list(range(start, stop)),
                    vectors=data.vectors[start:stop].tolist(),
                    payloads=[{"space_id": int(data.space_of[i])} for i in range(start, stop)],
                ),
            )
        build = time.perf_counter() - started
    # Only spaces inside the first `points` rows, so every query has something to find.
    present = sorted(set(data.space_of[:points].tolist()))
    rng = np.random.default_rng(3)
    local = Data(
        data.vectors,
        data.space_of,
        data.rows_of_space,
        data.queries,
        [[int(rng.choice(present))] for _ in range(queries)],
        [sorted(rng.choice(present, 4, replace=False).tolist()) for _ in range(queries)],
    )

    def run(q: int, spaces: list[int]) -> object:
        return client.query_points(
            "bench",
            query=data.queries[q].tolist(),
            limit=TOP_K,
            query_filter=qm.Filter(
                must=[qm.FieldCondition(key="space_id", match=qm.MatchAny(any=spaces))]
            ),
        )

    one, four = timed("qdrant-local", queries, run, local)
    client.close()
    return Row(
        f"Qdrant local mode ({points // 1000}k points)",
        *one,
        *four,
        build=f"{build:.1f} s",
        note="brute-force Python scan",
    )


# --- (e) hnswlib with a filter --------------------------------------------------------------


def bench_hnswlib(data: Data, queries: int, ef: int, index: object | None) -> tuple[Row, object]:
    import hnswlib

    build_note = ""
    if index is None:
        started = time.perf_counter()
        graph = hnswlib.Index(space="ip", dim=DIM)
        graph.init_index(max_elements=len(data.vectors), ef_construction=100, M=16)
        graph.set_num_threads(2)
        graph.add_items(data.vectors, np.arange(len(data.vectors)))
        graph.set_num_threads(1)
        build_note = f"{time.perf_counter() - started:.0f} s (2 threads, M=16, efC=100)"
        index = graph
    graph = index
    graph.set_ef(ef)  # type: ignore[attr-defined]
    found: dict[tuple[int, int], set[int]] = {}

    def run(q: int, spaces: list[int]) -> object:
        allowed = set(spaces)
        labels, _ = graph.knn_query(  # type: ignore[attr-defined]
            data.queries[q], k=TOP_K, filter=lambda label: int(data.space_of[label]) in allowed
        )
        found[(q, len(spaces))] = set(labels[0].tolist())
        return labels

    one, four = timed("hnswlib", queries, run, data)
    recalls = []
    for width, spaces_list in ((1, data.one_space), (4, data.four_spaces)):
        hits = [
            len(found[(q, width)] & exact_top(data, data.queries[q], spaces_list[q])) / TOP_K
            for q in range(queries)
            if (q, width) in found
        ]
        recalls.append(statistics.mean(hits))
    row = Row(
        f"hnswlib + filter, ef={ef}",
        *one,
        *four,
        recall=f"{recalls[0]:.2f} / {recalls[1]:.2f}",
        build=build_note,
    )
    return row, graph


# --- local embedder -------------------------------------------------------------------------


def scifact_chunks(count: int) -> list[str]:
    """The first 500 characters of the first `count` SciFact abstracts that long."""
    texts: list[str] = []
    with open(SCIFACT, encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line)["text"]
            if len(text) >= 500:
                texts.append(text[:500])
            if len(texts) == count:
                break
    return texts


async def bench_embedder(chunks: int) -> list[str]:
    from engram.indexer.embedders.local import LocalOnnxEmbedder

    texts = await asyncio.to_thread(scifact_chunks, chunks)
    lines = []
    for max_length in (256, 128):
        embedder = LocalOnnxEmbedder(max_length=max_length, batch_size=32, threads=2)
        await embedder.embed_documents(texts[:32])  # load + warm up
        cpu_before = time.process_time()
        started = time.perf_counter()
        await embedder.embed_documents(texts)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        embedder.close()
        # cores busy well under 2.0 means something else on the machine took the CPU.
        lines.append(
            f"max_len {max_length}, batch 32, 2 threads: {len(texts) / elapsed:.1f} chunks/s "
            f"({len(texts)} SciFact chunks of 500 chars; {cpu / elapsed:.2f} cores busy)"
        )
    return lines


# --- main -----------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    out = [
        "| index | 1 space p50 / p99 (ms) | 4 spaces p50 / p99 (ms) | recall@20 (1 / 4) | build |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        note = f" ({r.note})" if r.note else ""
        out.append(
            f"| {r.name}{note} | {r.p50_1:.2f} / {r.p99_1:.2f} | {r.p50_4:.2f} / {r.p99_4:.2f} "
            f"| {r.recall} | {r.build} |"
        )
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k vectors, fewer queries")
    parser.add_argument("--skip", default="", help="comma list: faiss,sqlite-vec,qdrant,hnsw,embed")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    total, queries = (10_000, 50) if args.quick else (100_000, 300)
    data = make_data(total, 100, queries)
    sizes = [len(r) for r in data.rows_of_space]
    print(
        f"{total} x {DIM} float32 over 100 spaces (sizes {min(sizes)}..{max(sizes)}, "
        f"median {int(statistics.median(sizes))}); top-{TOP_K}; {queries} queries each",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="engram-vector-bench-"))
    rows: list[Row] = []
    try:
        row, replace = await bench_numpy(data, queries, workdir)
        rows.append(row)
        print(table(rows[-1:]), flush=True)
        if "faiss" not in skip:
            rows.append(bench_faiss(data, queries))
            print(table(rows[-1:]), flush=True)
        if "sqlite-vec" not in skip:
            rows.append(bench_sqlite_vec(data, queries, workdir))
            print(table(rows[-1:]), flush=True)
        if "qdrant" not in skip:
            points = min(total, 20_000)
            rows.append(bench_qdrant_local(data, points, 10, workdir))
            print(table(rows[-1:]), flush=True)
        if "hnsw" not in skip:
            graph = None
            for ef in (64, 256):
                row, graph = bench_hnswlib(data, min(queries, 100), ef, graph)
                rows.append(row)
                print(table(rows[-1:]), flush=True)
        embed_lines = [] if "embed" in skip else await bench_embedder(64 if args.quick else 256)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(rows))
    print()
    print(
        "NumpyVectorIndex.replace_chunks, 4-chunk document (p50 / p99): "
        + ", ".join(f"{size}-chunk space {value}" for size, value in replace.items())
    )
    for line in embed_lines:
        print("Local embedder:", line)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "services"))
    asyncio.run(main())
