"""EdgeVectorIndex: the embedded vector index on Qdrant Edge, Qdrant's own engine, run in a
child process that the index owns.

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

Where the engine runs: `qdrant-edge-py` holds the GIL for the whole of every engine call
(an optimize of 20,000 points froze every other thread of its process for 22 s), so in the
serving process it would stop every RPC, health check and timer while it works. The shards
live instead in one child process (`EngineProcess` in `edge_process`, started by `open()`
and stopped by `close()`, running the calls in `edge_host`); this process sends it plain
data and awaits the answer, its event loop free meanwhile (bench/RESULTS.md, "The engine's
own process"). The child runs one call at a time, in order. A child that dies fails the
calls it was running with `IndexUnavailable`; the next call starts a new child, which
reopens the shards from disk (the WAL replays every acknowledged write). The child dies
with the serving process, so a restarted server finds the shards unlocked.

Edge builds indexes only when asked: writes land in an appendable segment that searches
scan in full; once writes have settled, a background task asks the child to run the
optimizer. The child is busy while it does: calls queue behind the optimization, and a
search whose leg times out meanwhile degrades with that reason (SearchService's backend
timeout); its call is cancelled before it reaches the child, so no backlog of abandoned
searches delays the next ones. `EdgeTuning.max_segment_size_kb` bounds how large a segment
one merge rebuilds.

One process owns a shard: Edge locks its WAL, and a second index opening the same directory
gets IndexUnavailable naming the owner problem (processes that share vectors reach them
through the process that owns the engine, see engram.app).

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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import normalize_path_prefix, path_scopes
from engram.indexes.ports import IndexModelMismatch, IndexUnavailable, Vectors
from engram.indexes.vector import edge_host
from engram.indexes.vector.edge_host import SHARD_DIR, EdgeTuning, Where
from engram.indexes.vector.edge_process import EngineProcess, Run
from engram.indexes.vector.legacy import LEGACY_COLLECTIONS_DIR, migrate_legacy
from engram.indexes.vector.paths import atomic_write_json, collection_dir_name
from engram.indexes.vector.points import check_chunks, chunk_of, payload, point_id

__all__ = ["EdgeTuning", "EdgeVectorIndex"]

log = logging.getLogger(__name__)

ALIAS_FILE = "alias.json"
EDGE_DIR = "edge"
MODEL_FILE = "model.json"


class _Collection:
    def __init__(self, info: ModelInfo, directory: Path) -> None:
        self.info = info
        self.directory = directory
        # Writes since the optimizer last ran; the optimizer task waits on `written`.
        self.dirty = False
        self.written = asyncio.Event()
        self.optimizer: asyncio.Task[None] | None = None
        # The optimization running now, if any (a close waits for it).
        self.optimizing: asyncio.Future[None] | None = None

    @property
    def shard_dir(self) -> str:
        return str(self.directory / SHARD_DIR)


class EdgeVectorIndex:
    """The `VectorIndex` on Qdrant Edge shards under `root`, served by a child process (see
    the module docstring)."""

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
        self._engine = EngineProcess(self._reopen)

    @property
    def tuning(self) -> EdgeTuning:
        return self._tuning

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            return
        await asyncio.to_thread((self._root / EDGE_DIR).mkdir, parents=True, exist_ok=True)
        found: dict[str, _Collection] = {}
        for directory in sorted(await asyncio.to_thread(_collection_dirs, self._root)):
            info = await asyncio.to_thread(_read_model, directory)
            if info is not None:
                found[info.model_id] = _Collection(info, directory)
        self._collections = found
        try:
            await self._engine.start()  # loads every shard (_reopen)
        except BaseException:
            self._collections = {}
            raise
        self._opened = True
        if await asyncio.to_thread((self._root / LEGACY_COLLECTIONS_DIR).is_dir):
            await migrate_legacy(self._root, self)
        active = await asyncio.to_thread(self._read_alias)
        self._active = active if active in self._collections else None
        for collection in self._collections.values():
            if collection.optimizer is None:
                self._start_optimizer(collection)

    async def close(self) -> None:
        if not self._opened:
            return
        self._opened = False
        collections, self._collections = list(self._collections.values()), {}
        for collection in collections:
            await self._stop_optimizer(collection)

        async def closing(run: Run) -> None:
            for collection in collections:
                with contextlib.suppress(IndexUnavailable):
                    await run(edge_host.close, collection.info.model_id)

        await self._engine.stop(closing)

    async def optimize(self) -> None:
        """Builds every pending index now (benchmarks and the migration wait on this)."""
        self._check_open()
        for collection in list(self._collections.values()):
            collection.dirty = False
            await self._optimize(collection)

    async def engine_pid(self) -> int:
        """The engine process's id (tests and benchmarks read its memory, or stop it)."""
        self._check_open()
        return await self._engine.call(edge_host.pid)

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
            collection = _Collection(
                model, self._root / EDGE_DIR / collection_dir_name(model.model_id)
            )

            def fresh_directory() -> None:
                shutil.rmtree(collection.directory, ignore_errors=True)
                collection.directory.mkdir(parents=True)

            # The shard first, the model file last: a directory without its model file is a
            # creation that did not finish, removed at the next open.
            await asyncio.to_thread(fresh_directory)
            await self._engine.call(
                edge_host.create,
                model.model_id,
                collection.shard_dir,
                model.dimension,
                self._tuning,
            )
            await asyncio.to_thread(
                atomic_write_json,
                collection.directory / MODEL_FILE,
                {"model_id": model.model_id, "dimension": model.dimension},
            )
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
            await self._engine.call(edge_host.close, model_id)
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
        ids = [point_id(chunk.chunk_id) for chunk in chunks]
        payloads = [payload(chunk, scopes) for chunk in chunks]
        # By id, not by chunk_index: a path re-created as a new document has new chunk ids
        # at the same indexes, and its predecessor's points must go too.
        stale = Where((space_id,), path=path, except_ids=tuple(ids))
        lock = self._path_locks.get((space_id, path))
        if lock is None:
            lock = self._path_locks[(space_id, path)] = asyncio.Lock()
        async with lock:
            # Looked up again: the collection may have been dropped while this waited (the
            # engine then fails on the closed shard instead of naming the model).
            collection = self._collection(model_id)
            await self._engine.call(edge_host.replace, model_id, ids, matrix, payloads, stale)
        self._mark_written(collection)

    async def delete_chunks(self, space_id: str, path: str) -> None:
        self._check_open()
        await self._delete_everywhere(Where((space_id,), path=path))

    async def delete_space(self, space_id: str) -> None:
        self._check_open()
        await self._delete_everywhere(Where((space_id,)))

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
        where = Where(
            tuple(sorted(set(space_ids))), scope=normalize_path_prefix(path_prefix) or None
        )
        call = self._engine.call(
            edge_host.search,
            model_id,
            query,
            where,
            limit,
            self._tuning,
        )
        rows = await call
        return [ScoredChunk(chunk=chunk_of(fields), score=score) for score, fields in rows]

    def retune_search(self, *, hnsw_ef: int, oversampling: float) -> None:
        """One beam width for every search, whatever the space's size, and `oversampling`
        (no rebuild; bench/scale_bench.py's ef curve)."""
        self._tuning = replace(
            self._tuning, hnsw_ef=hnsw_ef, large_space_ef=hnsw_ef, oversampling=oversampling
        )

    def restore_search_defaults(self, defaults: EdgeTuning) -> None:
        """Back to `defaults`' search-time settings, the beam width by the space's size."""
        self._tuning = replace(
            self._tuning,
            hnsw_ef=defaults.hnsw_ef,
            large_space_ef=defaults.large_space_ef,
            large_space_points=defaults.large_space_points,
            oversampling=defaults.oversampling,
        )

    async def chunks_of(
        self, space_id: str, path: str, *, model_id: str | None = None
    ) -> list[Chunk]:
        self._check_open()
        collection = self._target(model_id)
        if collection is None:
            return []
        found = await self._engine.call(
            edge_host.scroll, collection.info.model_id, Where((space_id,), path=path), True
        )
        return sorted((chunk_of(fields) for fields in found), key=lambda c: c.chunk_index)

    async def indexed_documents(
        self, space_id: str, *, model_id: str | None = None
    ) -> dict[str, IndexedDocument]:
        self._check_open()
        collection = self._target(model_id)
        if collection is None:
            return {}
        found = await self._engine.call(
            edge_host.scroll,
            collection.info.model_id,
            Where((space_id,)),
            ["path", "document_id", "doc_version"],
        )
        return indexed_documents(
            (str(p["path"]), str(p["document_id"]), int(p["doc_version"])) for p in found
        )

    async def import_points(
        self,
        model_id: str,
        ids: Sequence[str],
        vectors: Vectors,
        payloads: Sequence[Mapping[str, Any]],
    ) -> None:
        """Adds ready-made points (the migration of an earlier index; benchmarks' bulk load)."""
        collection = self._collection(model_id)
        matrix = np.asarray(vectors, dtype=np.float32)
        await self._engine.call(
            edge_host.upsert, model_id, list(ids), matrix, [dict(p) for p in payloads]
        )
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

    async def _delete_everywhere(self, where: Where) -> None:
        for collection in list(self._collections.values()):
            if self._collections.get(collection.info.model_id) is not collection:
                continue  # dropped meanwhile
            await self._engine.call(edge_host.delete, collection.info.model_id, where)
            self._mark_written(collection)

    async def _optimize(self, collection: _Collection) -> None:
        await self._engine.call(edge_host.optimize, collection.info.model_id)

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
            running = asyncio.ensure_future(self._optimize(collection))
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

    async def _reopen(self, run: Run) -> None:
        """Loads every collection's shard into a new engine process (the WAL replays what
        was acknowledged), then has the optimizer look at it: an index built by an earlier
        process, or by one that died, may have been left unoptimized."""
        for collection in list(self._collections.values()):
            info = collection.info
            try:
                await run(
                    edge_host.load,
                    info.model_id,
                    collection.shard_dir,
                    info.dimension,
                    self._tuning,
                )
            except IndexUnavailable as error:
                owned = "WouldBlock" in error.message
                raise IndexUnavailable(
                    f"vector collection {info.model_id!r} at {collection.directory} "
                    + (
                        "is open in another process (one process owns the embedded vector "
                        "index; the others reach it through that process)"
                        if owned
                        else f"could not be opened: {error.message}"
                    )
                ) from None
            self._mark_written(collection)


def _read_model(directory: Path) -> ModelInfo | None:
    """The collection's model, or None (and the directory removed) for a collection whose
    creation did not finish."""
    model_file = directory / MODEL_FILE
    if not model_file.is_file():
        shutil.rmtree(directory, ignore_errors=True)
        return None
    stored = json.loads(model_file.read_text(encoding="utf-8"))
    return ModelInfo(str(stored["model_id"]), int(stored["dimension"]))


def _collection_dirs(root: Path) -> list[Path]:
    """The collection directories, after removing those a crashed drop left behind."""
    found = []
    for directory in (root / EDGE_DIR).iterdir():
        if directory.name.startswith(".dropped-"):
            shutil.rmtree(directory, ignore_errors=True)
        elif directory.is_dir():
            found.append(directory)
    return found


def _check_same_dimension(known: ModelInfo, dimension: int) -> None:
    if known.dimension != dimension:
        raise IndexModelMismatch(
            f"model {known.model_id!r} already has a collection of dimension {known.dimension}, "
            f"not {dimension}: a changed model needs a new model id",
            field="model",
        )
