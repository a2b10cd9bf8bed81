"""Kept versions: read back, listed, and pruned beyond the retention."""

from __future__ import annotations

import sqlite3

from engram.backends.sqlite import SqliteDatabase
from engram.domain.documents import DocumentVersion
from engram.storage.sqlite.rows import version_of


class SqliteVersions:
    def __init__(self, database: SqliteDatabase, *, retention: int) -> None:
        self._db = database
        self._retention = retention

    async def get_version(self, space_id: str, path: str, version: int) -> DocumentVersion | None:
        def work(connection: sqlite3.Connection) -> DocumentVersion | None:
            current = connection.execute(
                "SELECT document_id FROM documents WHERE space_id = ? AND path = ?",
                (space_id, path),
            ).fetchone()
            if current is None:
                current = connection.execute(
                    "SELECT document_id FROM document_versions WHERE space_id = ? AND path = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (space_id, path),
                ).fetchone()
            if current is None:
                return None
            row = connection.execute(
                "SELECT seq, document_id, version, sha256, size_bytes, updated_us, updated_by, "
                "deleted, content FROM document_versions "
                "WHERE space_id = ? AND path = ? AND document_id = ? AND version = ? "
                "ORDER BY seq DESC LIMIT 1",
                (space_id, path, current[0], version),
            ).fetchone()
            return version_of(row, with_content=True) if row else None

        return await self._db.read_snapshot(work)

    async def list_versions(
        self, space_id: str, path: str, *, before_seq: int | None, limit: int
    ) -> list[DocumentVersion]:
        def work(connection: sqlite3.Connection) -> list[DocumentVersion]:
            rows = connection.execute(
                "SELECT seq, document_id, version, sha256, size_bytes, updated_us, updated_by, "
                "deleted, '' FROM document_versions WHERE space_id = ? AND path = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT ?",
                (space_id, path, before_seq if before_seq is not None else 2**62, limit),
            ).fetchall()
            return [version_of(row, with_content=False) for row in rows]

        return await self._db.read(work)

    async def prune_versions(self, space_id: str) -> int:
        def work(connection: sqlite3.Connection) -> int:
            cursor = connection.execute(
                "DELETE FROM document_versions WHERE seq IN ("
                "SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER "
                "(PARTITION BY path ORDER BY seq DESC) AS newer FROM document_versions "
                "WHERE space_id = ?) WHERE newer > ?)",
                (space_id, self._retention),
            )
            return int(cursor.rowcount)

        return await self._db.write(work)
