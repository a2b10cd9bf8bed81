"""Migration of the earlier embedded vector index (exact search over numpy matrices, one
SQLite file per model collection under `collections/`) into Qdrant Edge shards.

Each legacy file holds every chunk with the vector the indexer computed for it, so the
migration copies them as they are (nothing is embedded again), in batches, logging its
progress; the alias file keeps its name and format, so the active model stays active.
Points are upserted by id, so a migration interrupted by a crash simply runs again at the
next open; the legacy files are removed only once every collection was copied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engram.domain.chunks import Chunk, ModelInfo
from engram.domain.scoping import path_scopes
from engram.indexes.ports import Vectors
from engram.indexes.vector.points import payload, point_id

log = logging.getLogger(__name__)

LEGACY_COLLECTIONS_DIR = "collections"
LEGACY_DATABASE_FILE = "vectors.sqlite3"
BATCH = 2048


class MigrationTarget(Protocol):
    """What the migration needs of the new index (MigrationTarget)."""

    async def ensure_collection(self, model: ModelInfo) -> None: ...

    async def import_points(
        self,
        model_id: str,
        ids: Sequence[str],
        vectors: Vectors,
        payloads: Sequence[Mapping[str, Any]],
    ) -> None: ...

    async def optimize(self) -> None: ...


async def migrate_legacy(root: Path, index: MigrationTarget) -> int:
    """Copies every legacy collection under `root` into `index` (open), then removes the
    legacy files; returns the number of chunks copied."""
    legacy = root / LEGACY_COLLECTIONS_DIR
    files = await asyncio.to_thread(lambda: sorted(legacy.glob(f"*/{LEGACY_DATABASE_FILE}")))
    copied = 0
    for database in files:
        copied += await _migrate_collection(database, index)
    doomed = root / f".legacy-migrated-{uuid.uuid4().hex}"
    await asyncio.to_thread(os.replace, legacy, doomed)
    await asyncio.to_thread(shutil.rmtree, doomed, ignore_errors=True)
    if files:
        await index.optimize()
        log.info("vector index migrated to qdrant edge", extra={"chunks": copied})
    return copied


async def _migrate_collection(database: Path, index: MigrationTarget) -> int:
    connection = await asyncio.to_thread(_connect, database)
    try:
        row = connection.execute("SELECT model_id, dimension FROM collection_info").fetchone()
        if row is None:
            return 0
        model = ModelInfo(str(row[0]), int(row[1]))
        (total,) = connection.execute("SELECT COUNT(*) FROM vector_chunks").fetchone()
        await index.ensure_collection(model)
        log.info(
            "migrating a vector collection to qdrant edge",
            extra={"model": model.model_id, "chunks": total},
        )
        copied = 0
        last_report = time.monotonic()
        batches = _batches(connection)
        while (batch := await asyncio.to_thread(next, batches, None)) is not None:
            ids, vectors, payloads = batch
            await index.import_points(model.model_id, ids, vectors, payloads)
            copied += len(ids)
            if time.monotonic() - last_report >= 5.0 or copied == total:
                last_report = time.monotonic()
                log.info(
                    "vector migration progress",
                    extra={"model": model.model_id, "migrated": copied, "chunks": total},
                )
        return copied
    finally:
        await asyncio.to_thread(connection.close)


def _connect(database: Path) -> sqlite3.Connection:
    return sqlite3.connect(database, check_same_thread=False)


def _batches(
    connection: sqlite3.Connection,
) -> Iterator[tuple[list[str], Vectors, list[dict[str, Any]]]]:
    """Point ids, vectors and payloads, BATCH rows at a time."""
    cursor = connection.execute(
        "SELECT space_id, path, chunk_index, chunk_id, document_id, tenant, doc_version,"
        " content, vector FROM vector_chunks"
    )
    while rows := cursor.fetchmany(BATCH):
        ids, vectors, payloads = [], [], []
        for space_id, path, index, cid, did, tenant, version, content, blob in rows:
            chunk = Chunk(
                chunk_id=cid,
                document_id=did,
                space_id=space_id,
                tenant=tenant,
                path=path,
                chunk_index=int(index),
                doc_version=int(version),
                content=content,
            )
            ids.append(point_id(cid))
            vectors.append(np.frombuffer(blob, dtype="<f4"))
            payloads.append(payload(chunk, path_scopes(path)))
        yield ids, np.stack(vectors).astype(np.float32), payloads
