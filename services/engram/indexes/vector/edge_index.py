"""EdgeVectorIndex: the embedded vector index on Qdrant Edge, Qdrant's own engine in process.

Layout under `root`:

    alias.json                       the active model, replaced atomically (temp + rename)
    edge/<model dir>/model.json      the collection's model id and dimension
    edge/<model dir>/shard/          one Edge shard: segments, payload indexes, the WAL

One shard per model collection, cosine distance. Points are the chunks (id = UUID5 of the
chunk id, payload = the chunk's fields, as on a Qdrant server: `engram.indexes.vector.points`).
`space_id` carries a keyword payload index marked `is_tenant`, so every search is filtered
to its spaces inside the engine, and HNSW builds extra links per space (`payload_m`) that
keep a filtered graph search connected inside one space. `path_dirs` is indexed too, for
`path_prefix` (`engram.domain.scoping`).

Search is approximate (HNSW) over int8 scalar-quantized vectors, rescored on the original
float vectors; the planner answers a space smaller than `full_scan_threshold_kb` of
vectors exactly from the payload index, so tiny spaces lose nothing. The defaults in
`EdgeTuning` were chosen by measurement (bench/scale_bench.py, bench/RESULTS.md).

Edge builds indexes only when asked: writes land in an appendable segment that searches
scan in full; a background task runs the optimizer after writes settle, off the event
loop, while searches go on against the old segments.

One process owns a shard: Edge locks its WAL, and a second process opening the same
directory gets IndexUnavailable naming the owner problem (processes that share vectors
reach them through the process that owns the engine, see engram.app).

A root that still holds the earlier exact index's files (`collections/*/vectors.sqlite3`)
is migrated on open: each stored chunk and vector is copied into a new shard (progress
logged), then the old files are removed. The vectors are the ones the indexer computed,
so nothing is embedded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import qdrant_edge as qe

from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import PATH_SCOPES_FIELD, normalize_path_prefix, path_scopes
from engram.indexes.ports import IndexModelMismatch, IndexUnavailable, Vectors
from engram.indexes.vector.legacy import LEGACY_COLLECTIONS_DIR, migrate_legacy
from engram.indexes.vector.paths import atomic_write_json, collection_dir_name
from engram.indexes.vector.points import check_chunks, chunk_of, payload, point_id

log = logging.getLogger(__name__)

ALIAS_FILE = "alias.json"
EDGE_DIR = "edge"
MODEL_FILE = "model.json"
SHARD_DIR = "shard"
_SCROLL_PAGE = 1024
T = TypeVar("T")


@dataclass(frozen=True)
class EdgeTuning:
    """The engine's settings (bench/RESULTS.md, "Qdrant Edge": how each was chosen).

    m, ef_construct, payload_m: HNSW graph degree, build beam width, and the degree of the
    extra per-space links. hnsw_ef: the search beam width. oversampling: how many more
    quantized candidates than asked for are rescored on the original vectors.
    full_scan_threshold_kb: below this many KB of vectors matching a filter, a search is
    an exact scan of those points. indexing_threshold_kb: a segment is HNSW-indexed once
    its vectors pass this size. optimize_delay_seconds: how long writes must settle
    before the optimizer runs.
    """

    m: int = 16
    ef_construct: int = 128
    payload_m: int = 16
    hnsw_ef: int = 128
    oversampling: float = 2.0
    full_scan_threshold_kb: int = 2_000
    indexing_threshold_kb: int = 10_000
    optimize_delay_seconds: float = 1.0


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
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=tuning.indexing_threshold_kb),
        payload_memory=qe.Memory.Cold,
        wal_enabled=True,
    )


class _Collection:
    def __init__(self, info: ModelInfo, directory: Path, shard: qe.EdgeShard) -> None:
        self.info = info
        self.directory = directory
        self.shard = shard
        # Writes since the optimizer last ran; the optimizer task waits on `written`.
        self.dirty = False
        self.written = asyncio.Event()
        self.optimizer: asyncio.Task[None] | None = None
        # The optimization running now, if any (a close waits for it).
        self.optimizing: asyncio.Future[bool] | None = None


class EdgeVectorIndex:
    """The `VectorIndex` on Qdrant Edge shards under `root` (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        alias: str = "engram-chunks",
        tuning: EdgeTuning | None = None,
    ) -> None:
        self._root = root
        self._alias = alias
        self._tuning = tuning or EdgeTuning()
        self._collections: dict[str, _Collection] = {}
        self._active: str | None = None
        self._opened = False
        self._admin_lock = asyncio.Lock()
        # Upsert-then-delete of one path must not interleave with another replace of it.
        self._path_locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def tuning(self) -> EdgeTuning:
        return self._tuning

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            return
        await asyncio.to_thread((self._root / EDGE_DIR).mkdir, parents=True, exist_ok=True)
        loaded: dict[str, _Collection] = {}
        try:
            for directory in sorted(await asyncio.to_thread(_collection_dirs, self._root)):
                collection = await self._load_collection(directory)
                if collection is not None:
                    loaded[collection.info.model_id] = collection
        except BaseException:
            for collection in loaded.values():
                await asyncio.to_thread(collection.shard.close)
            raise
        self._collections = loaded
        self._opened = True
        if await asyncio.to_thread((self._root / LEGACY_COLLECTIONS_DIR).is_dir):
            await migrate_legacy(self._root, self)
        active = await asyncio.to_thread(self._read_alias)
        self._active = active if active in self._collections else None
        for collection in self._collections.values():
            if collection.optimizer is None:
                self._start_optimizer(collection)
            # An index built by an earlier process may have been left unoptimized.
            self._mark_written(collection)

    async def close(self) -> None:
        if not self._opened:
            return
        self._opened = False
        collections, self._collections = list(self._collections.values()), {}
        for collection in collections:
            await self._stop_optimizer(collection)
            await asyncio.to_thread(_close_shard, collection.shard)

    async def optimize(self) -> None:
        """Builds every pending index now (benchmarks and the migration wait on this)."""
        self._check_open()
        for collection in list(self._collections.values()):
            collection.dirty = False
            await self._engine(collection.shard.optimize)

    # --- collections -------------------------------------------------------------------------

    async def ensure_collection(self, model: ModelInfo) -> None:
        self._check_open()
        if model.dimension < 1 or not model.model_id:
            raise InvalidArgument(f"invalid model {model!r}: needs an id and a dimension >= 1")
        async with self._admin_lock:
            existing = self._collections.get(model.model_id)
            if existing is not None:
                _check_same_dimension(existing.info, model.dimension)
                return
            directory = self._root / EDGE_DIR / collection_dir_name(model.model_id)
            config = shard_config(model.dimension, self._tuning)

            def create() -> qe.EdgeShard:
                # The shard first, the model file last: a directory without its model file
                # is a creation that did not finish, removed at the next open.
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir(parents=True)
                shard = qe.EdgeShard.create(str(directory / SHARD_DIR), config)
                _create_payload_indexes(shard)
                shard.flush()
                atomic_write_json(
                    directory / MODEL_FILE,
                    {"model_id": model.model_id, "dimension": model.dimension},
                )
                return shard

            shard = await self._engine(create)
            collection = _Collection(model, directory, shard)
            self._collections[model.model_id] = collection
            self._start_optimizer(collection)

    async def active_model(self) -> ModelInfo | None:
        self._check_open()
        if self._active is None:
            return None
        return self._collections[self._active].info

    async def activate(self, model_id: str) -> None:
        self._check_open()
        async with self._admin_lock:
            self._collection(model_id)
            await asyncio.to_thread(
                atomic_write_json, self._root / ALIAS_FILE, {self._alias: model_id}
            )
            self._active = model_id

    async def collections(self) -> list[ModelInfo]:
        self._check_open()
        return sorted((c.info for c in self._collections.values()), key=lambda m: m.model_id)

    async def drop_collection(self, model_id: str) -> None:
        self._check_open()
        async with self._admin_lock:
            collection = self._collections.pop(model_id, None)
            if collection is None:
                return
            if self._active == model_id:
                await asyncio.to_thread(
                    atomic_write_json, self._root / ALIAS_FILE, {self._alias: None}
                )
                self._active = None
            await self._stop_optimizer(collection)
            await asyncio.to_thread(_close_shard, collection.shard)
            # Renamed first, so a crash mid-delete never leaves a half collection to load.
            doomed = collection.directory.with_name(f".dropped-{uuid.uuid4().hex}")
            await asyncio.to_thread(os.replace, collection.directory, doomed)
            await asyncio.to_thread(shutil.rmtree, doomed, ignore_errors=True)

    # --- chunks ------------------------------------------------------------------------------

    async def replace_chunks(
        self, model_id: str, space_id: str, path: str, chunks: Sequence[Chunk], vectors: Vectors
    ) -> None:
        self._check_open()
        collection = self._collection(model_id)
        dimension = collection.info.dimension
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.size == 0 and not chunks:
            matrix = matrix.reshape(0, dimension)
        if matrix.ndim != 2 or matrix.shape[1] != dimension:
            raise IndexModelMismatch(
                f"vectors of shape {matrix.shape} offered to {model_id!r}, whose dimension is "
                f"{dimension}",
                field="vectors",
            )
        check_chunks(space_id, path, chunks, matrix.shape[0])
        if len({chunk.chunk_index for chunk in chunks}) != len(chunks):
            raise InvalidArgument("two chunks share a chunk_index", field="chunks")
        scopes = path_scopes(path)
        points = [
            qe.Point(id=point_id(chunk.chunk_id), vector=row, payload=payload(chunk, scopes))
            for chunk, row in zip(chunks, matrix.tolist(), strict=True)
        ]
        # By id, not by chunk_index: a path re-created as a new document has new chunk ids
        # at the same indexes, and its predecessor's points must go too.
        stale = qe.Filter(
            must=_path_conditions(space_id, path),
            must_not=[qe.HasIdCondition({p.id for p in points})] if points else None,
        )

        def write() -> None:
            if points:
                collection.shard.update(qe.UpdateOperation.upsert_points(points))
            collection.shard.update(qe.UpdateOperation.delete_points_by_filter(stale))

        lock = self._path_locks.get((space_id, path))
        if lock is None:
            lock = self._path_locks[(space_id, path)] = asyncio.Lock()
        async with lock:
            # Looked up again: the collection may have been dropped while this waited (the
            # engine then fails on the closed shard instead of naming the model).
            collection = self._collection(model_id)
            await self._engine(write)
        self._mark_written(collection)

    async def delete_chunks(self, space_id: str, path: str) -> None:
        self._check_open()
        await self._delete_everywhere(qe.Filter(must=_path_conditions(space_id, path)))

    async def delete_space(self, space_id: str) -> None:
        self._check_open()
        await self._delete_everywhere(qe.Filter(must=[_space_condition(space_id)]))

    async def search(
        self,
        space_ids: Sequence[str],
        vector: Vectors,
        *,
        limit: int,
        path_prefix: str = "",
        model_id: str | None = None,
    ) -> list[ScoredChunk]:
        self._check_open()
        if model_id is None:
            if self._active is None:
                return []
            model_id = self._active
        collection = self._collection(model_id)
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (collection.info.dimension,):
            raise IndexModelMismatch(
                f"a query vector of shape {query.shape} for {model_id!r}, whose dimension is "
                f"{collection.info.dimension}",
                field="vector",
            )
        if limit <= 0 or not space_ids:
            return []
        conditions: list[qe.FieldCondition] = [
            qe.FieldCondition(key="space_id", match=qe.MatchAny(sorted(set(space_ids))))
        ]
        scope = normalize_path_prefix(path_prefix)
        if scope:
            conditions.append(qe.FieldCondition(key=PATH_SCOPES_FIELD, match=qe.MatchValue(scope)))
        request = qe.QueryRequest(
            query=qe.Query.Nearest(query.tolist()),
            filter=qe.Filter(must=list(conditions)),
            limit=limit,
            with_payload=True,
            with_vector=False,
            params=self.search_params(),
        )
        points = await self._engine(collection.shard.query, request)
        return [
            ScoredChunk(chunk=chunk_of(point.payload or {}), score=float(point.score))
            for point in points
        ]

    def search_params(self) -> qe.SearchParams:
        """The search settings every query uses."""
        return qe.SearchParams(
            hnsw_ef=self._tuning.hnsw_ef,
            quantization=qe.QuantizationSearchParams(
                rescore=True, oversampling=self._tuning.oversampling
            ),
        )

    def retune_search(self, *, hnsw_ef: int, oversampling: float) -> None:
        """Changes the search-time settings (no rebuild; bench/scale_bench.py's ef curve)."""
        self._tuning = replace(self._tuning, hnsw_ef=hnsw_ef, oversampling=oversampling)

    async def chunks_of(
        self, space_id: str, path: str, *, model_id: str | None = None
    ) -> list[Chunk]:
        self._check_open()
        collection = self._target(model_id)
        if collection is None:
            return []
        records = await self._scroll(
            collection, qe.Filter(must=_path_conditions(space_id, path)), True
        )
        return sorted((chunk_of(r.payload or {}) for r in records), key=lambda c: c.chunk_index)

    async def indexed_documents(
        self, space_id: str, *, model_id: str | None = None
    ) -> dict[str, IndexedDocument]:
        self._check_open()
        collection = self._target(model_id)
        if collection is None:
            return {}
        records = await self._scroll(
            collection,
            qe.Filter(must=[_space_condition(space_id)]),
            ["path", "document_id", "doc_version"],
        )
        return indexed_documents(
            (str(p["path"]), str(p["document_id"]), int(p["doc_version"]))
            for p in (r.payload or {} for r in records)
        )

    async def import_points(self, model_id: str, points: Sequence[qe.Point]) -> None:
        """Adds ready-made points (the migration of an earlier index; benchmarks' bulk load)."""
        collection = self._collection(model_id)
        await self._engine(collection.shard.update, qe.UpdateOperation.upsert_points(list(points)))
        self._mark_written(collection)

    # --- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._opened:
            raise IndexUnavailable("the vector index is not open")

    def _collection(self, model_id: str) -> _Collection:
        collection = self._collections.get(model_id)
        if collection is None:
            raise IndexModelMismatch(
                f"no vector collection for model {model_id!r}: ensure_collection first",
                field="model_id",
            )
        return collection

    def _target(self, model_id: str | None) -> _Collection | None:
        if model_id is None:
            if self._active is None:
                return None
            model_id = self._active
        return self._collection(model_id)

    async def _delete_everywhere(self, where: qe.Filter) -> None:
        for collection in list(self._collections.values()):
            if self._collections.get(collection.info.model_id) is not collection:
                continue  # dropped meanwhile
            await self._engine(
                collection.shard.update, qe.UpdateOperation.delete_points_by_filter(where)
            )
            self._mark_written(collection)

    async def _scroll(
        self, collection: _Collection, where: qe.Filter, with_payload: bool | list[str]
    ) -> list[Any]:
        def scroll_all() -> list[Any]:
            found: list[Any] = []
            offset: Any = None
            while True:
                records, offset = collection.shard.scroll(
                    qe.ScrollRequest(
                        offset=offset,
                        limit=_SCROLL_PAGE,
                        filter=where,
                        with_payload=with_payload,
                        with_vector=False,
                    )
                )
                found.extend(records)
                if offset is None:
                    return found

        return await self._engine(scroll_all)

    @staticmethod
    async def _engine(work: Callable[..., T], *args: Any) -> T:
        """Runs an engine call in a worker thread; its failures become IndexUnavailable."""
        try:
            return await asyncio.to_thread(work, *args)
        except (IndexUnavailable, InvalidArgument):
            raise
        except Exception as error:  # noqa: BLE001 - the engine raises plain Exception
            raise IndexUnavailable(f"qdrant edge failed: {error}") from None

    def _mark_written(self, collection: _Collection) -> None:
        collection.dirty = True
        collection.written.set()

    def _start_optimizer(self, collection: _Collection) -> None:
        collection.optimizer = asyncio.create_task(self._optimize_after_writes(collection))

    async def _stop_optimizer(self, collection: _Collection) -> None:
        task, collection.optimizer = collection.optimizer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running, collection.optimizing = collection.optimizing, None
        if running is not None:
            # The engine cannot be stopped mid-build; closing the shard waits for it.
            with contextlib.suppress(IndexUnavailable):
                await running

    async def _optimize_after_writes(self, collection: _Collection) -> None:
        """Runs the optimizer once writes have settled for `optimize_delay_seconds`."""
        delay = self._tuning.optimize_delay_seconds
        while True:
            await collection.written.wait()
            while collection.written.is_set():
                collection.written.clear()
                await asyncio.sleep(delay)
            if not collection.dirty:
                continue
            collection.dirty = False
            running = asyncio.ensure_future(self._engine(collection.shard.optimize))
            collection.optimizing = running
            try:
                # Shielded: a close cancels this task, then waits for the build itself.
                await asyncio.shield(running)
            except IndexUnavailable as error:
                log.warning("vector index optimization failed", extra={"error": error.message})

    def _read_alias(self) -> str | None:
        try:
            with open(self._root / ALIAS_FILE, encoding="utf-8") as handle:
                value = json.load(handle).get(self._alias)
        except FileNotFoundError:
            return None
        return value if isinstance(value, str) else None

    async def _load_collection(self, directory: Path) -> _Collection | None:
        model_file = directory / MODEL_FILE
        if not await asyncio.to_thread(model_file.is_file):
            # A collection whose creation did not finish.
            await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
            return None
        stored = json.loads(await asyncio.to_thread(model_file.read_text, encoding="utf-8"))
        info = ModelInfo(str(stored["model_id"]), int(stored["dimension"]))
        config = shard_config(info.dimension, self._tuning)
        try:
            shard = await asyncio.to_thread(qe.EdgeShard.load, str(directory / SHARD_DIR), config)
        except Exception as error:  # noqa: BLE001 - the engine raises plain Exception
            owned = "WouldBlock" in str(error)
            raise IndexUnavailable(
                f"vector collection {info.model_id!r} at {directory} "
                + (
                    "is open in another process (one process owns the embedded vector "
                    "index; the others reach it through that process)"
                    if owned
                    else f"could not be opened: {error}"
                )
            ) from None
        return _Collection(info, directory, shard)


def _collection_dirs(root: Path) -> list[Path]:
    """The collection directories, after removing those a crashed drop left behind."""
    found = []
    for directory in (root / EDGE_DIR).iterdir():
        if directory.name.startswith(".dropped-"):
            shutil.rmtree(directory, ignore_errors=True)
        elif directory.is_dir():
            found.append(directory)
    return found


def _close_shard(shard: qe.EdgeShard) -> None:
    shard.flush()
    shard.close()


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


def _space_condition(space_id: str) -> qe.FieldCondition:
    return qe.FieldCondition(key="space_id", match=qe.MatchValue(space_id))


def _path_conditions(space_id: str, path: str) -> list[Any]:
    return [_space_condition(space_id), qe.FieldCondition(key="path", match=qe.MatchValue(path))]


def _check_same_dimension(known: ModelInfo, dimension: int) -> None:
    if known.dimension != dimension:
        raise IndexModelMismatch(
            f"model {known.model_id!r} already has a collection of dimension {known.dimension}, "
            f"not {dimension}: a changed model needs a new model id",
            field="model",
        )
