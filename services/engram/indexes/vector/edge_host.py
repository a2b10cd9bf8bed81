"""The Qdrant Edge engine's own process: the shards, and the calls `EdgeVectorIndex` sends.

`qdrant-edge-py` holds the GIL for the whole of every engine call (0.9.0, measured: an
optimize of 20,000 points of 384 dimensions ran 22 s, and a Python thread ticking every 5 ms
got no tick for those 22 s). In the serving process that froze every RPC, health check and
timer for as long as the engine worked, whatever thread the call ran in. So the engine runs
here, in a child process of its own (one worker of a `ProcessPoolExecutor`, see
`EdgeVectorIndex`), and the serving process only sends plain data: model ids, point ids,
float32 matrices, payload dicts and `Where` filters, which are built into Edge's objects
here (those are not picklable). Every function below runs in the child, one at a time.

Engine failures come back as `EngineFailure` (a plain exception carrying the message, which
pickles); the parent maps them to `IndexUnavailable`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver
from typing import Any

import numpy as np
import numpy.typing as npt
import qdrant_edge as qe

from engram.domain.scoping import PATH_SCOPES_FIELD

SHARD_DIR = "shard"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SCROLL_PAGE = 1024

# The open shards of this process, by model id.
_SHARDS: dict[str, qe.EdgeShard] = {}


@dataclass(frozen=True)
class EdgeTuning:
    """The engine's settings (bench/RESULTS.md, "Qdrant Edge": how each was chosen).

    m, ef_construct, payload_m: HNSW graph degree, build beam width, and the degree of the
    extra per-space links. hnsw_ef: the search beam width. oversampling: how many more
    quantized candidates than asked for are rescored on the original vectors.
    full_scan_threshold_kb: below this many KB of vectors matching a filter, a search is
    an exact scan of those points. indexing_threshold_kb: a segment is HNSW-indexed once
    its vectors pass this size. max_segment_size_kb: the optimizer builds no segment
    larger than this (None: Edge's default), which bounds one merge's rebuild.
    optimize_delay_seconds: how long writes must settle before the optimizer runs.
    large_space_points, large_space_ef: the beam width for a search whose filter matches
    at least that many points (the engine's estimate). At a fixed ef, a larger space is
    both found better and searched slower: at 1M chunks a 100,000-chunk space gave recall@10
    1.000 at ef 64 in 2.2 ms p50 and at ef 128 in 3.8 ms, where a 10,000-chunk space needs
    ef 128 for 0.97 (ef 64: 0.93).
    """

    m: int = 16
    ef_construct: int = 128
    payload_m: int = 16
    hnsw_ef: int = 128
    oversampling: float = 2.0
    full_scan_threshold_kb: int = 2_000
    indexing_threshold_kb: int = 10_000
    max_segment_size_kb: int | None = None
    optimize_delay_seconds: float = 1.0
    large_space_points: int = 50_000
    large_space_ef: int = 64


@dataclass(frozen=True)
class Where:
    """A filter as plain data: points of these spaces (any of them), at `path` if set, under
    the directory `scope` if set, other than the ids in `except_ids`."""

    space_ids: tuple[str, ...]
    path: str | None = None
    scope: str | None = None
    except_ids: tuple[str, ...] = ()


class EngineFailure(Exception):
    """An engine call failed in the child (the message is the engine's)."""


def shard_config(dimension: int, tuning: EdgeTuning) -> qe.EdgeConfig:
    """A collection's shard: the HNSW graph and the int8 vectors in RAM; the original
    vectors (read only to rescore a query's candidates) and the payload memory-mapped from
    disk; the WAL on."""
    return qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(
            size=dimension, distance=qe.Distance.Cosine, memory=qe.Memory.Cold
        ),
        hnsw_config=qe.HnswIndexConfig(
            m=tuning.m,
            ef_construct=tuning.ef_construct,
            full_scan_threshold=tuning.full_scan_threshold_kb,
            payload_m=tuning.payload_m,
        ),
        quantization_config=qe.ScalarQuantizationConfig(
            type=qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Pinned
        ),
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=tuning.indexing_threshold_kb,
            max_segment_size=tuning.max_segment_size_kb,
        ),
        payload_memory=qe.Memory.Cold,
        wal_enabled=True,
    )


# --- the calls (each runs in the child) ------------------------------------------------------


def start() -> None:
    """The worker's initializer. Ctrl-C reaches the whole process group, but the parent
    decides when the shards close (it flushes them first).

    And the engine dies with the serving process, even mid-call: left running, it would
    hold the shard's lock (the restarted server could not open it), and a pool's worker
    never sees its parent go (it holds both ends of its own call queue). Its parent is
    multiprocessing's fork server, which exits once no process holds the write end of its
    "alive" pipe: the serving process does, and a forked child gets a copy, closed here.
    Then the kernel kills this process when the fork server exits (PR_SET_PDEATHSIG, which
    needs no Python code to run: an engine call holds the GIL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if isinstance(alive, int):
        with contextlib.suppress(OSError):
            os.close(alive)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the fork server was already gone
            os._exit(1)


def create(model_id: str, shard_dir: str, dimension: int, tuning: EdgeTuning) -> None:
    """Creates the model's shard at `shard_dir` with its payload indexes, and holds it."""
    with _engine():
        shard = qe.EdgeShard.create(shard_dir, shard_config(dimension, tuning))
        _create_payload_indexes(shard)
        shard.flush()
        _SHARDS[model_id] = shard


def load(model_id: str, shard_dir: str, dimension: int, tuning: EdgeTuning) -> None:
    """Opens the model's shard from disk (its WAL replays acknowledged writes), and holds it."""
    with _engine():
        _SHARDS[model_id] = qe.EdgeShard.load(shard_dir, shard_config(dimension, tuning))


def close(model_id: str) -> None:
    """Flushes and closes the model's shard (nothing if it is not open)."""
    shard = _SHARDS.pop(model_id, None)
    if shard is not None:
        with _engine():
            shard.flush()
            shard.close()


def replace(
    model_id: str,
    ids: Sequence[str],
    vectors: npt.NDArray[np.float32],
    payloads: Sequence[dict[str, Any]],
    stale: Where,
) -> None:
    """Upserts the points, then deletes what `stale` still matches."""
    with _engine():
        shard = _shard(model_id)
        if ids:
            shard.update(qe.UpdateOperation.upsert_points(_points(ids, vectors, payloads)))
        shard.update(qe.UpdateOperation.delete_points_by_filter(_filter(stale)))


def upsert(
    model_id: str,
    ids: Sequence[str],
    vectors: npt.NDArray[np.float32],
    payloads: Sequence[dict[str, Any]],
) -> None:
    with _engine():
        _shard(model_id).update(qe.UpdateOperation.upsert_points(_points(ids, vectors, payloads)))


def delete(model_id: str, where: Where) -> None:
    with _engine():
        _shard(model_id).update(qe.UpdateOperation.delete_points_by_filter(_filter(where)))


def search(
    model_id: str,
    vector: npt.NDArray[np.float32],
    where: Where,
    limit: int,
    tuning: EdgeTuning,
) -> list[tuple[float, dict[str, Any]]]:
    """(score, payload) of the nearest points matching `where`, best first."""
    matching = _filter(where)
    with _engine():
        shard = _shard(model_id)
        request = qe.QueryRequest(
            query=qe.Query.Nearest(vector.tolist()),
            filter=matching,
            limit=limit,
            with_payload=True,
            with_vector=False,
            params=qe.SearchParams(
                hnsw_ef=search_ef(shard, matching, tuning),
                quantization=qe.QuantizationSearchParams(
                    rescore=True, oversampling=tuning.oversampling
                ),
            ),
        )
        points = shard.query(request)
    return [(float(point.score), dict(point.payload or {})) for point in points]


def search_ef(shard: qe.EdgeShard, matching: qe.Filter, tuning: EdgeTuning) -> int:
    """The beam width for a search of the points `matching` selects: `large_space_ef` once
    the engine estimates at least `large_space_points` of them (from the payload index's
    cardinality, not a scan), else `hnsw_ef`."""
    if tuning.large_space_ef == tuning.hnsw_ef:
        return tuning.hnsw_ef
    estimate = shard.count(qe.CountRequest(exact=False, filter=matching))
    return tuning.large_space_ef if estimate >= tuning.large_space_points else tuning.hnsw_ef


def scroll(model_id: str, where: Where, fields: bool | list[str]) -> list[dict[str, Any]]:
    """The payload (`fields` of it, or all) of every point matching `where`."""
    found: list[dict[str, Any]] = []
    offset: Any = None
    with _engine():
        shard = _shard(model_id)
        while True:
            records, offset = shard.scroll(
                qe.ScrollRequest(
                    offset=offset,
                    limit=_SCROLL_PAGE,
                    filter=_filter(where),
                    with_payload=fields,
                    with_vector=False,
                )
            )
            found.extend(dict(record.payload or {}) for record in records)
            if offset is None:
                return found


def optimize(model_id: str) -> bool:
    """Runs the optimizer until nothing is planned; True if anything was rebuilt."""
    with _engine():
        return bool(_shard(model_id).optimize())


def pid() -> int:
    """This process's id (tests and benchmarks read the engine's own memory through it)."""
    return os.getpid()


# --- internals -------------------------------------------------------------------------------


@contextlib.contextmanager
def _engine() -> Iterator[None]:
    """Re-raises whatever the engine raises as EngineFailure, which pickles back."""
    try:
        yield
    except EngineFailure:
        raise
    except Exception as error:  # noqa: BLE001 - the engine raises plain Exception
        raise EngineFailure(str(error)) from None


def _shard(model_id: str) -> qe.EdgeShard:
    shard = _SHARDS.get(model_id)
    if shard is None:
        raise EngineFailure(f"no open shard for model {model_id!r} in the engine process")
    return shard


def _points(
    ids: Sequence[str], vectors: npt.NDArray[np.float32], payloads: Sequence[Mapping[str, Any]]
) -> list[qe.Point]:
    return [
        qe.Point(id=point, vector=row, payload=dict(payload))
        for point, row, payload in zip(ids, vectors.tolist(), payloads, strict=True)
    ]


def _filter(where: Where) -> qe.Filter:
    ids = list(where.space_ids)
    must: list[Any] = [
        qe.FieldCondition(key="space_id", match=qe.MatchValue(ids[0]))
        if len(ids) == 1
        else qe.FieldCondition(key="space_id", match=qe.MatchAny(ids))
    ]
    if where.path is not None:
        must.append(qe.FieldCondition(key="path", match=qe.MatchValue(where.path)))
    if where.scope is not None:
        must.append(qe.FieldCondition(key=PATH_SCOPES_FIELD, match=qe.MatchValue(where.scope)))
    except_ids: list[Any] | None = (
        [qe.HasIdCondition(set(where.except_ids))] if where.except_ids else None
    )
    return qe.Filter(must=must, must_not=except_ids)


def _create_payload_indexes(shard: qe.EdgeShard) -> None:
    shard.update(
        qe.UpdateOperation.create_field_index("space_id", qe.KeywordIndexParams(is_tenant=True))
    )
    # Filters of replace/delete and path_prefix; read from disk, kept off the RSS.
    for field in ("path", PATH_SCOPES_FIELD):
        shard.update(
            qe.UpdateOperation.create_field_index(
                field, qe.KeywordIndexParams(memory=qe.Memory.Cold)
            )
        )
