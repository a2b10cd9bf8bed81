"""Listings over the documents table: a directory, a space's documents for export, every
live path, usage and the spaces of a tenant."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

from engram.backends.sqlite import SqliteDatabase, from_micros
from engram.domain.documents import PathEntry, SpaceSummary, SpaceUsage
from engram.domain.spaces import SpaceRef, parse_space_id


class SqliteListings:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def list_paths(
        self, space_id: str, *, directory: str, start: str, inclusive: bool, limit: int
    ) -> list[PathEntry]:
        lower, op = start, (">=" if inclusive else ">")
        bounds = ""
        params: list[object] = [space_id, lower]
        if directory:
            bounds = "AND path >= ? AND path < ? "
            params += [directory + "/", directory + "0"]
        params.append(limit)

        def work(connection: sqlite3.Connection) -> list[PathEntry]:
            rows = connection.execute(
                f"SELECT path, size_bytes, updated_us FROM documents "
                f"WHERE space_id = ? AND path {op} ? {bounds}ORDER BY path LIMIT ?",
                params,
            ).fetchall()
            return [PathEntry(str(p), int(s), from_micros(int(u))) for p, s, u in rows]

        return await self._db.read(work)

    async def iter_paths(
        self, space_id: str | None = None, *, page_size: int = 1000
    ) -> AsyncIterator[tuple[str, str]]:
        """(space_id, path) of every document of one space (or of all), in that order, read
        a page at a time (the indexer's backfill)."""
        after = ("", "")
        while True:

            def work(connection: sqlite3.Connection, after: tuple[str, str] = after) -> list[Any]:
                if space_id is None:
                    return connection.execute(
                        "SELECT space_id, path FROM documents WHERE (space_id, path) > (?, ?) "
                        "ORDER BY space_id, path LIMIT ?",
                        (*after, page_size),
                    ).fetchall()
                return connection.execute(
                    "SELECT space_id, path FROM documents WHERE space_id = ? AND path > ? "
                    "ORDER BY path LIMIT ?",
                    (space_id, after[1], page_size),
                ).fetchall()

            rows = await self._db.read(work)
            for found_space, path in rows:
                yield str(found_space), str(path)
            if len(rows) < page_size:
                return
            after = (str(rows[-1][0]), str(rows[-1][1]))

    async def space_usage(self, space_id: str) -> SpaceUsage:
        def work(connection: sqlite3.Connection) -> SpaceUsage:
            used, count = connection.execute(
                "SELECT COALESCE(SUM(size_bytes), 0), COUNT(*) FROM documents WHERE space_id = ?",
                (space_id,),
            ).fetchone()
            return SpaceUsage(used_bytes=int(used), document_count=int(count))

        return await self._db.read(work)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        def work(connection: sqlite3.Connection) -> dict[str, int]:
            rows = connection.execute(
                "SELECT space_id, SUM(size_bytes) FROM documents WHERE tenant = ? "
                "GROUP BY space_id",
                (aggregate_owner,),
            ).fetchall()
            return {str(space_id): int(total) for space_id, total in rows}

        return await self._db.read(work)

    async def list_spaces(
        self, aggregate_owner: str, *, after: str, limit: int
    ) -> list[SpaceSummary]:
        def work(connection: sqlite3.Connection) -> list[SpaceSummary]:
            rows = connection.execute(
                "SELECT space_id, COUNT(*), SUM(size_bytes), MAX(updated_us) FROM documents "
                "WHERE tenant = ? AND space_id > ? GROUP BY space_id ORDER BY space_id LIMIT ?",
                (aggregate_owner, after, limit),
            ).fetchall()
            return [
                SpaceSummary(
                    space=parse_space_id(str(space_id)),
                    document_count=int(count),
                    used_bytes=int(used),
                    last_write_at=from_micros(int(last)),
                )
                for space_id, count, used, last in rows
            ]

        return await self._db.read(work)

    async def all_spaces(self, *, after: str, limit: int) -> list[SpaceRef]:
        def work(connection: sqlite3.Connection) -> list[SpaceRef]:
            rows = connection.execute(
                "SELECT DISTINCT space_id FROM documents WHERE space_id > ? "
                "ORDER BY space_id LIMIT ?",
                (after, limit),
            ).fetchall()
            return [parse_space_id(str(space_id)) for (space_id,) in rows]

        return await self._db.read(work)

    async def all_paths(self, *, after: tuple[str, str], limit: int) -> list[tuple[str, str]]:
        def work(connection: sqlite3.Connection) -> list[tuple[str, str]]:
            rows = connection.execute(
                "SELECT space_id, path FROM documents WHERE (space_id, path) > (?, ?) "
                "ORDER BY space_id, path LIMIT ?",
                (*after, limit),
            ).fetchall()
            return [(str(space_id), str(path)) for space_id, path in rows]

        return await self._db.read(work)
