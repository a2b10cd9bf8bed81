"""Dreaming's per-space watermark: how much of each daily log the model has seen.

A watermark only moves forward from the generation it was read at: `advance` raises
WatermarkMoved when another run advanced it first, so two runs that raced past the lease
cannot both record their input (the loser fails; the next run starts from the winner's).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from pymongo import DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.sqlite import SqliteDatabase, to_micros
from engram.domain.dreaming import LogMark, Watermark
from engram.domain.errors import Conflict

# Part of the embedded database's schema (pass it to SqliteDatabase.open).
SCHEMA = """
CREATE TABLE IF NOT EXISTS dream_watermarks (
    space_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    logs TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
"""


class WatermarkMoved(Conflict):
    """Another run advanced the space's watermark since this one read it."""

    reason = "WATERMARK_MOVED"


class WatermarkStore(Protocol):
    async def load(self, space_id: str) -> Watermark:
        """The space's watermark (generation 0 and no marks before the first run)."""
        ...

    async def advance(
        self, space_id: str, read: Watermark, logs: Mapping[str, LogMark], at: datetime
    ) -> Watermark:
        """Stores `logs` as the generation after `read`'s; raises WatermarkMoved if the
        stored watermark is no longer `read`'s generation."""
        ...


def _moved(space_id: str) -> WatermarkMoved:
    return WatermarkMoved(
        f"the dream watermark of {space_id} was advanced by another run; the next run "
        "continues from it"
    )


def _encode(logs: Mapping[str, LogMark]) -> list[dict[str, Any]]:
    # A list, not a mapping keyed by path: Mongo field names may not hold dots.
    return [
        {"path": path, "length": mark.length, "sha256": mark.sha256}
        for path, mark in sorted(logs.items())
    ]


def _decode(generation: int, entries: list[dict[str, Any]]) -> Watermark:
    return Watermark(
        generation=generation,
        logs={
            str(entry["path"]): LogMark(length=int(entry["length"]), sha256=str(entry["sha256"]))
            for entry in entries
        },
    )


class SqliteWatermarkStore:
    """The embedded database: compare and set in one write transaction."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def load(self, space_id: str) -> Watermark:
        def load(connection: sqlite3.Connection) -> Watermark:
            row = connection.execute(
                "SELECT generation, logs FROM dream_watermarks WHERE space_id = ?", (space_id,)
            ).fetchone()
            return Watermark() if row is None else _decode(int(row[0]), json.loads(row[1]))

        return await self._database.read(load)

    async def advance(
        self, space_id: str, read: Watermark, logs: Mapping[str, LogMark], at: datetime
    ) -> Watermark:
        encoded = json.dumps(_encode(logs), separators=(",", ":"))
        generation = read.generation + 1

        def advance(connection: sqlite3.Connection) -> None:
            row = connection.execute(
                "SELECT generation FROM dream_watermarks WHERE space_id = ?", (space_id,)
            ).fetchone()
            if (0 if row is None else int(row[0])) != read.generation:
                raise _moved(space_id)
            connection.execute(
                "INSERT INTO dream_watermarks (space_id, generation, logs, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (space_id) DO UPDATE SET "
                "generation = excluded.generation, logs = excluded.logs, "
                "updated_at = excluded.updated_at",
                (space_id, generation, encoded, to_micros(at)),
            )

        await self._database.write(advance)
        return Watermark(generation=generation, logs=dict(logs))


class MongoWatermarkStore:
    """MongoDB and FerretDB, whose updates are not atomic under concurrency (only unique
    inserts are): each generation is its own document, `_id` `<space id>#<generation>`, so
    of two runs advancing from one generation only one insert lands. The newest generation
    is the watermark; after an insert the run checks it is still the newest (an insert of a
    generation already pruned would land, but below the newest) and prunes all but the two
    newest, so a space keeps two small documents."""

    def __init__(self, database: MongoDatabase, collection: str = "dream_watermarks") -> None:
        self._collection = database[collection]

    async def ensure_indexes(self) -> None:
        await ensure_indexes(
            self._collection,
            [IndexModel([("space", 1), ("generation", DESCENDING)], name="space_generation")],
        )

    async def load(self, space_id: str) -> Watermark:
        with mongo_errors("reading a dream watermark"):
            latest = await self._latest(space_id)
        if latest is None:
            return Watermark()
        return _decode(int(latest["generation"]), list(latest["logs"]))

    async def advance(
        self, space_id: str, read: Watermark, logs: Mapping[str, LogMark], at: datetime
    ) -> Watermark:
        generation = read.generation + 1
        entry_id = f"{space_id}#{generation}"
        with mongo_errors("advancing a dream watermark"):
            try:
                await self._collection.insert_one(
                    {
                        "_id": entry_id,
                        "space": space_id,
                        "generation": generation,
                        "logs": _encode(logs),
                        "at": at,
                    }
                )
            except DuplicateKeyError:
                raise _moved(space_id) from None
            latest = await self._latest(space_id)
            if latest is None or int(latest["generation"]) != generation:
                await self._collection.delete_one({"_id": entry_id})
                raise _moved(space_id)
            await self._collection.delete_many(
                {"space": space_id, "generation": {"$lt": generation - 1}}
            )
        return Watermark(generation=generation, logs=dict(logs))

    async def _latest(self, space_id: str) -> dict[str, Any] | None:
        return await self._collection.find_one(
            {"space": space_id}, sort=[("generation", DESCENDING)]
        )
