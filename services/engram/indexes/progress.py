"""Index progress: what each index leg holds, per document, for read-your-writes searches.

The indexer records a row per (space_id, path, document_id) and leg after the leg applied
the document (see engram.domain.positions); a search carrying positions waits until the
rows reach them. Rows only move up (`max`), so a duplicate or late record is harmless.

Adapters: `SqliteIndexProgress` (engram dev: indexer and search share one process, and a
waiter sleeps until a record wakes it) and `MongoIndexProgress` (real backends: the
indexer's own database; a search process polls the few rows it needs with backoff through
the indexer's GetIndexProgress, never the collection). Both are only ever read by
_id / primary key.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.sqlite import SqliteDatabase, to_micros
from engram.domain.positions import IndexLeg, IndexPosition, ProgressKey, behind

SCHEMA = """
CREATE TABLE IF NOT EXISTS index_progress (
    space_id        TEXT NOT NULL,
    path            TEXT NOT NULL,
    document_id     TEXT NOT NULL,
    keyword_version INTEGER NOT NULL DEFAULT 0,
    vector_version  INTEGER NOT NULL DEFAULT 0,
    updated_us      INTEGER NOT NULL,
    PRIMARY KEY (space_id, path, document_id)
);
"""

_COLUMNS = {IndexLeg.KEYWORD: "keyword_version", IndexLeg.VECTOR: "vector_version"}
# Polling backoff of a waiter on a store that does not notify: first and longest pause.
POLL_FIRST_SECONDS = 0.005
POLL_MAX_SECONDS = 0.25
# A notifying store is still re-read this often (a missed wake-up cannot stall a waiter).
NOTIFIED_RECHECK_SECONDS = 1.0
# Checks one wait makes at most, whatever its budget.
MAX_CHECKS = 10_000


class ProgressReader(Protocol):
    """What a search waiting for positions reads: the store itself, or the indexer's
    GetIndexProgress (engram.search.indexer_progress) when search is a process of its own."""

    # True when `wait_change` returns as soon as a record lands (one process).
    notifies: bool

    async def reached(self, leg: IndexLeg, keys: Sequence[ProgressKey]) -> dict[ProgressKey, int]:
        """The leg's recorded version of each key that has a row."""
        ...

    def generation(self) -> int:
        """A counter that moves on every record in this process (for `wait_change`)."""
        ...

    async def wait_change(self, generation: int, within: float) -> None:
        """Returns when a record moved `generation` on (if the store notifies) or after
        `within` seconds."""
        ...


class IndexProgress(ProgressReader, Protocol):
    """The indexer's own store of progress rows: it records them and reads them."""

    async def record(
        self, leg: IndexLeg, space_id: str, path: str, versions: Mapping[str, int]
    ) -> None:
        """Raises the leg's row of each document id of the path to at least its version."""
        ...

    async def forget_space(self, space_id: str) -> None:
        """Drops every row of the space (DeleteSpace)."""
        ...


async def wait_for_positions(
    progress: ProgressReader,
    leg: IndexLeg,
    positions: Sequence[IndexPosition],
    budget_seconds: float,
) -> list[IndexPosition]:
    """Waits until the leg has reached every position or the budget is spent; returns the
    positions still not reached (empty: all reached). Re-reads on every notification, or
    with exponential backoff (5 ms doubling to 250 ms) when the store does not notify."""
    if not positions:
        return []
    deadline = time.monotonic() + max(0.0, budget_seconds)
    pause = POLL_FIRST_SECONDS
    pending = list(positions)
    for _ in range(MAX_CHECKS):
        generation = progress.generation()
        pending = behind(pending, await progress.reached(leg, [p.key for p in pending]))
        remaining = deadline - time.monotonic()
        if not pending or remaining <= 0:
            return pending
        if progress.notifies:
            await progress.wait_change(generation, min(remaining, NOTIFIED_RECHECK_SECONDS))
        else:
            await progress.wait_change(generation, min(remaining, pause))
            pause = min(pause * 2, POLL_MAX_SECONDS)
    return pending


class _Notifier:
    """A generation counter with waiters, for the stores whose indexer is in-process."""

    def __init__(self) -> None:
        self._generation = 0
        self._moved = asyncio.Event()

    def generation(self) -> int:
        return self._generation

    def moved(self) -> None:
        self._generation += 1
        self._moved.set()
        self._moved = asyncio.Event()

    async def wait(self, generation: int, within: float) -> None:
        if self._generation != generation:
            return
        event = self._moved
        try:
            async with asyncio.timeout(within):
                await event.wait()
        except TimeoutError:
            return


class SqliteIndexProgress:
    """Rows in the embedded SQLite database (its SCHEMA must be part of `open`)."""

    notifies = True

    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database
        self._notifier = _Notifier()

    async def record(
        self, leg: IndexLeg, space_id: str, path: str, versions: Mapping[str, int]
    ) -> None:
        if not versions:
            return
        column = _COLUMNS[leg]
        now = to_micros(datetime.now(UTC))
        rows = [
            (space_id, path, document_id, version, now) for document_id, version in versions.items()
        ]

        def upsert(connection: sqlite3.Connection) -> None:
            connection.executemany(
                f"INSERT INTO index_progress (space_id, path, document_id, {column}, updated_us) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (space_id, path, document_id) DO UPDATE SET "
                f"{column} = max({column}, excluded.{column}), updated_us = excluded.updated_us",
                rows,
            )

        await self._db.write(upsert)
        self._notifier.moved()

    async def reached(self, leg: IndexLeg, keys: Sequence[ProgressKey]) -> dict[ProgressKey, int]:
        column = _COLUMNS[leg]
        wanted = list(dict.fromkeys(keys))

        def select(connection: sqlite3.Connection) -> dict[ProgressKey, int]:
            found: dict[ProgressKey, int] = {}
            for key in wanted:
                row = connection.execute(
                    f"SELECT {column} FROM index_progress "
                    "WHERE space_id = ? AND path = ? AND document_id = ?",
                    key,
                ).fetchone()
                if row is not None:
                    found[key] = int(row[0])
            return found

        return await self._db.read(select)

    async def forget_space(self, space_id: str) -> None:
        await self._db.write(
            lambda connection: connection.execute(
                "DELETE FROM index_progress WHERE space_id = ?", (space_id,)
            )
        )

    def generation(self) -> int:
        return self._notifier.generation()

    async def wait_change(self, generation: int, within: float) -> None:
        await self._notifier.wait(generation, within)


def _row_id(space_id: str, path: str, document_id: str) -> str:
    return f"{space_id}\n{path}\n{document_id}"


class MongoIndexProgress:
    """Rows in the `index_progress` collection, _id `<space_id>\\n<path>\\n<document_id>`.

    Written with `$max` upserts by every indexer replica. FerretDB v1 applies updates as
    read-modify-write, so two replicas recording the same row at once can leave the lower
    of the two values: a search then waits longer (bounded by its budget), never answers
    before the index holds the write. Records made in this process still wake its waiters.
    """

    notifies = False

    def __init__(self, database: MongoDatabase) -> None:
        self._rows = database["index_progress"]
        self._notifier = _Notifier()

    async def ensure_indexes(self) -> None:
        """Rows are read by _id; DeleteSpace drops a space's rows by `space_id`."""
        await ensure_indexes(self._rows, [IndexModel([("space_id", ASCENDING)], name="space_id")])

    async def record(
        self, leg: IndexLeg, space_id: str, path: str, versions: Mapping[str, int]
    ) -> None:
        column = _COLUMNS[leg]
        now = datetime.now(UTC)
        with mongo_errors("recording index progress"):
            for document_id, version in versions.items():
                row_id = _row_id(space_id, path, document_id)
                update = {
                    "$max": {column: version},
                    "$set": {"space_id": space_id, "updated_at": now},
                }
                try:
                    await self._rows.update_one({"_id": row_id}, update, upsert=True)
                except DuplicateKeyError:
                    # Another replica inserted the row first; now it exists.
                    await self._rows.update_one({"_id": row_id}, update)
        self._notifier.moved()

    async def reached(self, leg: IndexLeg, keys: Sequence[ProgressKey]) -> dict[ProgressKey, int]:
        column = _COLUMNS[leg]
        wanted = list(dict.fromkeys(keys))
        with mongo_errors("reading index progress"):
            rows = await asyncio.gather(
                *(self._rows.find_one({"_id": _row_id(*key)}, {column: 1}) for key in wanted)
            )
        return {
            key: int(row.get(column, 0))
            for key, row in zip(wanted, rows, strict=True)
            if row is not None
        }

    async def forget_space(self, space_id: str) -> None:
        with mongo_errors("forgetting index progress"):
            await self._rows.delete_many({"space_id": space_id})

    def generation(self) -> int:
        return self._notifier.generation()

    async def wait_change(self, generation: int, within: float) -> None:
        await self._notifier.wait(generation, within)
