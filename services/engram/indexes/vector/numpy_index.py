"""NumpyVectorIndex: the embedded vector index - exact cosine search over per-space matrices.

Measured (ARCHITECTURE §4, bench/RESULTS.md): at 100k x 384 over 100 spaces, a matrix per
space answers a space-filtered top-20 faster than faiss, sqlite-vec or HNSW, and loses no
recall, because a space filter leaves only the rows that must be scored anyway.

Layout under `root`:

    alias.json                       the active model, replaced atomically (temp + rename)
    collections/<model dir>/
        vectors.sqlite3              the collection: model id, dimension, every chunk + vector

Each collection persists to its own SQLite file (WAL), so a replace of a few chunks is one
small transaction (tens of microseconds, whatever the space size; rewriting a 5k-chunk
space's matrix file with fsync took ~9 ms) and a crash loses nothing committed. The
matrices live in memory and are rebuilt from the file on `open`.

Concurrency: every mutation of a space's arrays happens on the event loop without an await
in between, after its SQLite transaction committed, under that space's lock. Small searches
run inline (a few hundred microseconds); large ones run in a worker thread while holding
the locks of the spaces they read, so no write can move rows under them.

Several processes may write one directory (indexer, search and maintenance on one host,
`make cluster-local`): each replace is one SQLite transaction that deletes the path's rows,
inserts the new ones and appends the (space, path) to the collection's change log
(`vector_changes`), so the files always hold the last committed replace of each path. A
process opened with `follow_seconds` reads the log every `follow_seconds` and reloads the
paths others changed, and picks up collections and alias moves made by others; a search
that finds the follower more than `STALE_AFTER_SECONDS` behind fails with IndexUnavailable
(the search degrades, naming why) instead of answering from stale matrices. Start such
processes one after another when the directory is new (open removes a collection directory
still lacking its file).

Only this index can be shared by processes: a Qdrant Edge shard is owned by one process
(it locks its WAL), which is why `engram dev` (one process) uses Edge and the multi-process
layout on one host uses this one (bench/RESULTS.md, "Qdrant Edge").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import json
import logging
import os
import re
import shutil
import sqlite3
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from engram.backends.sqlite import SqliteDatabase
from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument, Unavailable
from engram.domain.scoping import normalize_path_prefix
from engram.indexes.ports import IndexModelMismatch, IndexUnavailable, Vectors

ALIAS_FILE = "alias.json"
COLLECTIONS_DIR = "collections"
DATABASE_FILE = "vectors.sqlite3"
# Above this many rows to score, a search leaves the event loop (~1 ms of numpy work).
INLINE_SEARCH_ROWS = 16_384

SCHEMA = """
CREATE TABLE IF NOT EXISTS collection_info (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    model_id TEXT NOT NULL,
    dimension INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS vector_chunks (
    space_id TEXT NOT NULL,
    path TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    chunk_id TEXT NOT NULL,
    document_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    doc_version INTEGER NOT NULL,
    content TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (space_id, path, chunk_index)
);
CREATE TABLE IF NOT EXISTS vector_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    space_id TEXT NOT NULL,
    path TEXT
);
"""
# The change log keeps this many entries; a follower further behind reloads the collection.
CHANGES_KEPT = 100_000
# A following index whose last catch-up is older than this answers no search.
STALE_AFTER_SECONDS = 5.0

_FLOAT32 = np.dtype("<f4")
log = logging.getLogger(__name__)
T = TypeVar("T")


def collection_dir_name(model_id: str) -> str:
    """A file-system-safe directory name, unique per model id."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", model_id)[:64]
    digest = hashlib.sha256(model_id.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}"


def _normalised_rows(vectors: Vectors) -> Vectors:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    result: Vectors = (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return result


def _atomic_write_json(path: Path, payload: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# Chunk fields, one numpy object array per field, grown with the vectors. A numpy array is
# not a container the cyclic garbage collector traverses; a list is, element by element:
# with the fields in lists, one full collection at 1M resident chunks visited 7M strings and
# took 200-450 ms, stopping the event loop (bench/scale_bench.py; Chunk objects were worse).
_COLUMNS = ("chunk_id", "document_id", "tenant", "path", "chunk_index", "doc_version", "content")


class _Space:
    """One space's chunks of one collection: row i of `vectors` is the chunk in row i of
    the columns; rows from `size` on are spare capacity."""

    def __init__(self, space_id: str, dimension: int) -> None:
        self.space_id = space_id
        self.dimension = dimension
        self.vectors: npt.NDArray[np.float32] = np.empty((0, dimension), dtype=np.float32)
        self.size = 0
        self.columns: dict[str, npt.NDArray[np.object_]] = {
            name: np.empty(0, dtype=object) for name in _COLUMNS
        }
        # Tuples of ints, which the garbage collector stops tracking.
        self.rows_by_path: dict[str, tuple[int, ...]] = {}
        self._paths: npt.NDArray[np.str_] | None = None

    def chunk(self, row: int) -> Chunk:
        c = self.columns
        return Chunk(
            chunk_id=c["chunk_id"][row],
            document_id=c["document_id"][row],
            space_id=self.space_id,
            tenant=c["tenant"][row],
            path=c["path"][row],
            chunk_index=c["chunk_index"][row],
            doc_version=c["doc_version"][row],
            content=c["content"][row],
        )

    def remove(self, path: str) -> None:
        rows = self.rows_by_path.pop(path, None)
        if not rows:
            return
        paths = self.columns["path"]
        # Swap-remove from the highest row down: the last row is never one still to remove.
        for row in sorted(rows, reverse=True):
            last = self.size - 1
            if row != last:
                self.vectors[row] = self.vectors[last]
                for column in self.columns.values():
                    column[row] = column[last]
                moved = paths[row]
                self.rows_by_path[moved] = tuple(
                    row if r == last else r for r in self.rows_by_path[moved]
                )
            for column in self.columns.values():
                column[last] = None
            self.size -= 1
        self._paths = None

    def reserve(self, rows: int) -> None:
        """Room for `rows` more rows without growing."""
        needed = self.size + rows
        if needed <= self.vectors.shape[0]:
            return
        capacity = max(needed, 2 * self.vectors.shape[0], 16) if self.size else needed
        grown = np.empty((capacity, self.dimension), dtype=np.float32)
        grown[: self.size] = self.vectors[: self.size]
        self.vectors = grown
        for name, column in self.columns.items():
            wider = np.empty(capacity, dtype=object)
            wider[: self.size] = column[: self.size]
            self.columns[name] = wider

    def append(self, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        self.reserve(len(chunks))
        start, needed = self.size, self.size + len(chunks)
        self.vectors[start:needed] = vectors
        added: dict[str, list[int]] = {}
        for offset, chunk in enumerate(chunks):
            added.setdefault(chunk.path, []).append(start + offset)
        for name, column in self.columns.items():
            for offset, chunk in enumerate(chunks):
                column[start + offset] = getattr(chunk, name)
        for path, rows in added.items():
            self.rows_by_path[path] = self.rows_by_path.get(path, ()) + tuple(rows)
        self.size = needed
        self._paths = None

    def load_row(
        self,
        path: str,
        chunk_index: int,
        chunk_id: str,
        document_id: str,
        tenant: str,
        doc_version: int,
        content: str,
        vector: Vectors,
    ) -> None:
        """Appends one stored row (its vector normalised already) into room made by
        `reserve`, while loading; the paths' row tuples are built by `finish_load`."""
        row = self.size
        self.vectors[row] = vector
        c = self.columns
        c["chunk_id"][row] = chunk_id
        c["document_id"][row] = document_id
        c["tenant"][row] = tenant
        c["path"][row] = path
        c["chunk_index"][row] = chunk_index
        c["doc_version"][row] = doc_version
        c["content"][row] = content
        self.size = row + 1

    def finish_load(self) -> None:
        rows: dict[str, list[int]] = {}
        for row, path in enumerate(self.columns["path"][: self.size]):
            rows.setdefault(path, []).append(row)
        self.rows_by_path = {path: tuple(found) for path, found in rows.items()}
        self._paths = None

    def search(self, query: Vectors, limit: int, scope: str) -> list[tuple[float, int]]:
        """(score, row) of the best `limit` rows in `scope` (a normalised path prefix: a
        directory or a document path; "" = all), best first."""
        if self.size == 0:
            return []
        matrix = self.vectors[: self.size]
        rows: npt.NDArray[np.intp] | None = None
        if scope:
            if self._paths is None:
                self._paths = np.array(self.columns["path"][: self.size], dtype=np.str_)
            inside = (self._paths == scope) | np.strings.startswith(self._paths, scope + "/")
            rows = np.flatnonzero(inside)
            if rows.size == 0:
                return []
            matrix = matrix[rows]
        # numpy's own loop, not BLAS: OpenBLAS's gemv starts its threads above a few
        # thousand rows, and on a busy machine they wait for cores the concurrent searches
        # and the event loop need (a 4,000-row scan took 9 ms instead of 0.3 on 2 loaded
        # cores); single-threaded, einsum also beats OpenBLAS's gemv from ~16k rows on
        # (bench/scale_bench.py scan).
        scores = np.einsum("ij,j->i", matrix, query)
        if scores.shape[0] > limit:
            best = np.argpartition(-scores, limit - 1)[:limit]
        else:
            best = np.arange(scores.shape[0])
        best = best[np.argsort(-scores[best], kind="stable")]
        picked = best if rows is None else rows[best]
        return [(float(scores[b]), int(p)) for b, p in zip(best, picked, strict=True)]

    def chunks_of(self, path: str) -> list[Chunk]:
        found = [self.chunk(row) for row in self.rows_by_path.get(path, ())]
        return sorted(found, key=lambda chunk: chunk.chunk_index)


@dataclass(eq=False)
class _Collection:
    info: ModelInfo
    directory: Path
    database: SqliteDatabase
    spaces: dict[str, _Space] = field(default_factory=dict)
    # The last change-log entry the in-memory matrices include.
    seen: int = 0

    def space(self, space_id: str) -> _Space:
        space = self.spaces.get(space_id)
        if space is None:
            space = self.spaces[space_id] = _Space(space_id, self.info.dimension)
        return space


class NumpyVectorIndex:
    """The `VectorIndex` of the embedded mode (see the module docstring)."""

    def __init__(
        self, root: Path, *, alias: str = "engram-chunks", follow_seconds: float | None = None
    ) -> None:
        self._root = root
        self._follow_seconds = follow_seconds
        self._follower: asyncio.Task[None] | None = None
        self._followed_at = 0.0
        # Bumped by this process's own alias moves: a catch-up that raced one keeps it.
        self._alias_moves = 0
        self._alias = alias
        self._collections: dict[str, _Collection] = {}
        self._active: str | None = None
        # Weak: a space nobody is writing or searching keeps no lock alive.
        self._space_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # Serialises collection-level changes (create, activate, drop).
        self._admin_lock = asyncio.Lock()
        self._opened = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            return
        await asyncio.to_thread((self._root / COLLECTIONS_DIR).mkdir, parents=True, exist_ok=True)
        directories = await asyncio.to_thread(
            lambda: sorted(p for p in (self._root / COLLECTIONS_DIR).iterdir() if p.is_dir())
        )
        for directory in directories:
            if directory.name.startswith("."):
                # A drop that crashed after its rename: finish it.
                await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
                continue
            collection = await self._load_collection(directory)
            if collection is not None:
                self._collections[collection.info.model_id] = collection
        alias = await asyncio.to_thread(self._read_alias)
        self._active = alias if alias in self._collections else None
        self._opened = True
        if self._follow_seconds is not None:
            self._followed_at = time.monotonic()
            self._follower = asyncio.create_task(self._follow(self._follow_seconds))

    async def close(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        collections = list(self._collections.values())
        self._collections.clear()
        self._active = None
        self._opened = False
        for collection in collections:
            await collection.database.close()

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
            directory = self._root / COLLECTIONS_DIR / collection_dir_name(model.model_id)
            await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
            database = SqliteDatabase(directory / DATABASE_FILE, readers=1)
            await self._guard(database.open([SCHEMA]))

            def record(connection: sqlite3.Connection) -> tuple[str, int]:
                connection.execute(
                    "INSERT OR IGNORE INTO collection_info (singleton, model_id, dimension)"
                    " VALUES (1, ?, ?)",
                    (model.model_id, model.dimension),
                )
                row = connection.execute(
                    "SELECT model_id, dimension FROM collection_info"
                ).fetchone()
                return str(row[0]), int(row[1])

            stored_id, stored_dimension = await self._guard(database.write(record))
            collection = _Collection(ModelInfo(stored_id, stored_dimension), directory, database)
            self._collections[stored_id] = collection
            _check_same_dimension(collection.info, model.dimension)

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
                _atomic_write_json, self._root / ALIAS_FILE, {self._alias: model_id}
            )
            self._active = model_id
            self._alias_moves += 1

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
                    _atomic_write_json, self._root / ALIAS_FILE, {self._alias: None}
                )
                self._active = None
                self._alias_moves += 1
            await collection.database.close()
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
        _check_chunks(space_id, path, chunks, matrix.shape[0])
        matrix = _normalised_rows(matrix)
        rows = [
            (
                space_id,
                path,
                chunk.chunk_index,
                chunk.chunk_id,
                chunk.document_id,
                chunk.tenant,
                chunk.doc_version,
                chunk.content,
                matrix[i].astype(_FLOAT32, copy=False).tobytes(),
            )
            for i, chunk in enumerate(chunks)
        ]

        def write(connection: sqlite3.Connection) -> None:
            connection.execute(
                "DELETE FROM vector_chunks WHERE space_id = ? AND path = ?", (space_id, path)
            )
            connection.executemany(
                "INSERT INTO vector_chunks (space_id, path, chunk_index, chunk_id, document_id,"
                " tenant, doc_version, content, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            _log_change(connection, space_id, path)

        async with self._space_lock(space_id):
            await self._guard(collection.database.write(write))
            space = collection.space(space_id)
            space.remove(path)
            space.append(chunks, matrix)

    async def delete_chunks(self, space_id: str, path: str) -> None:
        self._check_open()

        def delete(connection: sqlite3.Connection) -> None:
            connection.execute(
                "DELETE FROM vector_chunks WHERE space_id = ? AND path = ?", (space_id, path)
            )
            _log_change(connection, space_id, path)

        async with self._space_lock(space_id):
            for collection in list(self._collections.values()):
                # Always on disk, even when this process holds no rows for the path: another
                # process sharing the directory may have written them.
                await self._guard(collection.database.write(delete))
                space = collection.spaces.get(space_id)
                if space is not None:
                    space.remove(path)

    async def delete_space(self, space_id: str) -> None:
        self._check_open()

        def delete(connection: sqlite3.Connection) -> None:
            connection.execute("DELETE FROM vector_chunks WHERE space_id = ?", (space_id,))
            _log_change(connection, space_id, None)

        async with self._space_lock(space_id):
            for collection in list(self._collections.values()):
                await self._guard(collection.database.write(delete))
                collection.spaces.pop(space_id, None)

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
        self._check_fresh()
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
        if limit <= 0:
            return []
        query = _normalised_rows(query)
        scope = normalize_path_prefix(path_prefix)
        wanted = sorted(set(space_ids))
        spaces = [s for s in (collection.spaces.get(i) for i in wanted) if s is not None]
        if sum(space.size for space in spaces) <= INLINE_SEARCH_ROWS:
            return _search_spaces(spaces, query, limit, scope)
        async with AsyncExitStack() as stack:
            for space_id in wanted:
                await stack.enter_async_context(self._space_lock(space_id))
            # Read again under the locks: a write may have created a space meanwhile.
            spaces = [s for s in (collection.spaces.get(i) for i in wanted) if s is not None]
            return await asyncio.to_thread(_search_spaces, spaces, query, limit, scope)

    async def chunks_of(
        self, space_id: str, path: str, *, model_id: str | None = None
    ) -> list[Chunk]:
        self._check_open()
        if model_id is None:
            if self._active is None:
                return []
            model_id = self._active
        space = self._collection(model_id).spaces.get(space_id)
        return [] if space is None else space.chunks_of(path)

    async def indexed_documents(
        self, space_id: str, *, model_id: str | None = None
    ) -> dict[str, IndexedDocument]:
        """Read from the collection's file, not the in-memory matrices: other processes
        sharing the directory may have written rows this one has not loaded."""
        self._check_open()
        if model_id is None:
            if self._active is None:
                return {}
            model_id = self._active
        collection = self._collection(model_id)

        def read(connection: sqlite3.Connection) -> dict[str, IndexedDocument]:
            rows = connection.execute(
                "SELECT path, document_id, doc_version FROM vector_chunks WHERE space_id = ?",
                (space_id,),
            )
            return indexed_documents((str(p), str(d), int(v)) for p, d, v in rows)

        return await self._guard(collection.database.read(read))

    # --- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._opened:
            raise IndexUnavailable("the vector index is not open")

    def _check_fresh(self) -> None:
        if self._follower is None:
            return
        behind = time.monotonic() - self._followed_at
        if behind > STALE_AFTER_SECONDS:
            raise IndexUnavailable(
                f"the vector index has not read other processes' writes for {behind:.0f} s: "
                "its answers would miss their vectors"
            )

    # --- following other processes' writes ---------------------------------------------------

    async def _follow(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self._catch_up()
            except (IndexUnavailable, OSError, ValueError) as error:
                log.warning(
                    "vector index could not follow the directory", extra={"error": str(error)}
                )
                continue
            self._followed_at = time.monotonic()

    async def _catch_up(self) -> None:
        """Loads collections and alias moves other processes made, then the paths their
        writes changed since this process last looked."""
        async with self._admin_lock:
            moves = self._alias_moves
            known = {c.directory.name for c in self._collections.values()}
            directories = await asyncio.to_thread(_collection_dirs, self._root)
            for directory in directories:
                if directory.name not in known:
                    collection = await self._load_collection(directory, remove_incomplete=False)
                    if collection is not None:
                        self._collections[collection.info.model_id] = collection
            present = {d.name for d in directories}
            for model_id, collection in list(self._collections.items()):
                if collection.directory.name not in present:
                    del self._collections[model_id]
                    await collection.database.close()
            # Read before the changes: an alias moved after this read is seen at the next
            # catch-up, by which time the collection it names holds what was written before.
            alias = await asyncio.to_thread(self._read_alias)
        for collection in list(self._collections.values()):
            await self._apply_changes(collection)
        # The alias moves only after its collection caught up, so a search never reads a
        # newly active collection without the writes made before the move.
        if moves == self._alias_moves:
            self._active = alias if alias in self._collections else None

    async def _apply_changes(self, collection: _Collection) -> None:
        seen = collection.seen

        def read(
            connection: sqlite3.Connection,
        ) -> tuple[int, bool, dict[tuple[str, str | None], list[Any]]]:
            first, last = connection.execute(
                "SELECT MIN(seq), MAX(seq) FROM vector_changes"
            ).fetchone()
            if last is None or last <= seen:
                return seen, False, {}
            if first > seen + 1:
                return int(last), True, {}
            keys = dict.fromkeys(
                (str(space_id), None if path is None else str(path))
                for space_id, path in connection.execute(
                    "SELECT space_id, path FROM vector_changes WHERE seq > ? ORDER BY seq", (seen,)
                )
            )
            found: dict[tuple[str, str | None], list[Any]] = {}
            for space_id, path in keys:
                where, params = (
                    ("space_id = ?", (space_id,))
                    if path is None
                    else ("space_id = ? AND path = ?", (space_id, path))
                )
                found[(space_id, path)] = connection.execute(
                    "SELECT space_id, path, chunk_index, chunk_id, document_id, tenant,"
                    f" doc_version, content, vector FROM vector_chunks WHERE {where}",
                    params,
                ).fetchall()
            return int(last), False, found

        last, gap, changes = await self._guard(collection.database.read_snapshot(read))
        if gap:
            # Behind the kept log: the whole collection again.
            reloaded = await self._load_collection(
                collection.directory, database=collection.database
            )
            if reloaded is not None:
                collection.spaces, collection.seen = reloaded.spaces, reloaded.seen
            return
        for (space_id, path), rows in changes.items():
            chunks = [
                Chunk(
                    chunk_id=cid,
                    document_id=did,
                    space_id=sid,
                    tenant=tenant,
                    path=p,
                    chunk_index=int(index),
                    doc_version=int(version),
                    content=content,
                )
                for sid, p, index, cid, did, tenant, version, content, _ in rows
            ]
            matrix = np.array(
                [np.frombuffer(row[8], dtype=_FLOAT32) for row in rows], dtype=np.float32
            ).reshape(len(rows), collection.info.dimension)
            async with self._space_lock(space_id):
                if path is None:
                    collection.spaces.pop(space_id, None)
                    by_path: dict[str, list[int]] = {}
                    for i, chunk in enumerate(chunks):
                        by_path.setdefault(chunk.path, []).append(i)
                    for indexes in by_path.values():
                        space = collection.space(space_id)
                        space.append([chunks[i] for i in indexes], matrix[indexes])
                else:
                    space = collection.space(space_id)
                    space.remove(path)
                    space.append(chunks, matrix)
        collection.seen = last

    def _collection(self, model_id: str) -> _Collection:
        collection = self._collections.get(model_id)
        if collection is None:
            raise IndexModelMismatch(
                f"no vector collection for model {model_id!r}: ensure_collection first",
                field="model_id",
            )
        return collection

    @asynccontextmanager
    async def _space_lock(self, space_id: str) -> AsyncIterator[None]:
        lock = self._space_locks.get(space_id)
        if lock is None:
            lock = self._space_locks[space_id] = asyncio.Lock()
        async with lock:
            yield

    @staticmethod
    async def _guard(work: Awaitable[T]) -> T:
        try:
            return await work
        except IndexUnavailable:
            raise
        except Unavailable as error:
            raise IndexUnavailable(f"vector index storage failed: {error.message}") from None

    def _read_alias(self) -> str | None:
        try:
            with open(self._root / ALIAS_FILE, encoding="utf-8") as handle:
                value = json.load(handle).get(self._alias)
        except FileNotFoundError:
            return None
        return value if isinstance(value, str) else None

    async def _load_collection(
        self,
        directory: Path,
        *,
        database: SqliteDatabase | None = None,
        remove_incomplete: bool = True,
    ) -> _Collection | None:
        """The collection in `directory`, or None when its creation is not complete: removed
        at open (`remove_incomplete`), only skipped by a follower's catch-up, which may
        look while another process is creating it (removing it there lost that process's
        new collection, and the model switch it was made for)."""
        if database is None:
            if not await asyncio.to_thread((directory / DATABASE_FILE).is_file):
                # A collection whose creation did not get as far as its database file.
                if remove_incomplete:
                    await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
                return None
            database = SqliteDatabase(directory / DATABASE_FILE, readers=1)
            await self._guard(database.open([SCHEMA]))

        def load(connection: sqlite3.Connection) -> tuple[ModelInfo | None, dict[str, _Space], int]:
            (seen,) = connection.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM vector_changes"
            ).fetchone()
            row = connection.execute("SELECT model_id, dimension FROM collection_info").fetchone()
            if row is None:
                return None, {}, 0
            info = ModelInfo(str(row[0]), int(row[1]))
            # Each space's matrix is allocated at its final size and filled row by row, and
            # the repeated strings (tenant, path, document id: one per document, not per
            # chunk) are shared: no Chunk objects, no list of blobs, no second copy of the
            # vectors, so the peak while loading 1M chunks is what stays resident after.
            counts = connection.execute(
                "SELECT space_id, COUNT(*) FROM vector_chunks GROUP BY space_id"
            ).fetchall()
            spaces = {
                str(space_id): _Space(str(space_id), info.dimension) for space_id, _ in counts
            }
            for space_id, count in counts:
                spaces[space_id].reserve(int(count))
            shared: dict[str, str] = {}
            cursor = connection.execute(
                "SELECT space_id, path, chunk_index, chunk_id, document_id, tenant,"
                " doc_version, content, vector FROM vector_chunks"
            )
            for space_id, path, index, cid, did, tenant, version, content, blob in cursor:
                spaces[space_id].load_row(
                    shared.setdefault(path, path),
                    int(index),
                    cid,
                    shared.setdefault(did, did),
                    shared.setdefault(tenant, tenant),
                    int(version),
                    content,
                    np.frombuffer(blob, dtype=_FLOAT32),
                )
            for space in spaces.values():
                space.finish_load()
            return info, spaces, int(seen)

        info, spaces, seen = await self._guard(database.read_snapshot(load))
        if info is None:
            await database.close()
            if remove_incomplete:
                await asyncio.to_thread(shutil.rmtree, directory, ignore_errors=True)
            return None
        return _Collection(info, directory, database, spaces, seen)


def _log_change(connection: sqlite3.Connection, space_id: str, path: str | None) -> None:
    """Appends to the change log other processes follow (path None = the whole space),
    trimming it to CHANGES_KEPT entries now and then."""
    cursor = connection.execute(
        "INSERT INTO vector_changes (space_id, path) VALUES (?, ?)", (space_id, path)
    )
    seq = cursor.lastrowid or 0
    if seq % 1000 == 0:
        connection.execute("DELETE FROM vector_changes WHERE seq <= ?", (seq - CHANGES_KEPT,))


def _collection_dirs(root: Path) -> list[Path]:
    """Collection directories with their database file (others are being created)."""
    return sorted(
        p
        for p in (root / COLLECTIONS_DIR).iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / DATABASE_FILE).is_file()
    )


def _check_same_dimension(known: ModelInfo, dimension: int) -> None:
    if known.dimension != dimension:
        raise IndexModelMismatch(
            f"model {known.model_id!r} already has a collection of dimension {known.dimension}, "
            f"not {dimension}: a changed model needs a new model id",
            field="model",
        )


def _check_chunks(space_id: str, path: str, chunks: Sequence[Chunk], vector_rows: int) -> None:
    if vector_rows != len(chunks):
        raise InvalidArgument(f"{len(chunks)} chunks but {vector_rows} vectors", field="vectors")
    indexes = set()
    for chunk in chunks:
        if chunk.space_id != space_id or chunk.path != path:
            raise InvalidArgument(
                f"chunk {chunk.chunk_id!r} belongs to ({chunk.space_id!r}, {chunk.path!r}), "
                f"not ({space_id!r}, {path!r})",
                field="chunks",
            )
        indexes.add(chunk.chunk_index)
    if len(indexes) != len(chunks):
        raise InvalidArgument("two chunks share a chunk_index", field="chunks")


def _search_spaces(
    spaces: Sequence[_Space], query: Vectors, limit: int, scope: str
) -> list[ScoredChunk]:
    hits: list[tuple[float, int, _Space]] = []
    for space in spaces:
        hits.extend((score, row, space) for score, row in space.search(query, limit, scope))
    if len(spaces) > 1:
        hits = heapq.nlargest(limit, hits, key=lambda hit: hit[0])
    return [ScoredChunk(chunk=space.chunk(row), score=score) for score, row, space in hits]
