"""SqliteOutbox: the `outbox` table SqliteDocumentRepository appends to in each change.

Published events are marked, not deleted: they stay for the change feed until they are older
than its retention, then `prune` removes them a bounded batch at a time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from datetime import datetime

from google.protobuf.message import DecodeError

from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.events.ports import OutboxMessage
from engram.v1 import events_pb2


def _trace_context(payload: bytes) -> tuple[tuple[str, str], ...]:
    """The trace context recorded in an event payload; () for one that does not decode (the
    consumer dead-letters it)."""
    try:
        recorded = events_pb2.DocumentEvent.FromString(payload).trace_context
    except DecodeError:
        return ()
    return tuple(sorted(recorded.items()))


class SqliteOutbox:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def pending(self, limit: int) -> list[OutboxMessage]:
        def work(connection: sqlite3.Connection) -> list[OutboxMessage]:
            rows = connection.execute(
                "SELECT seq, event_id, subject, payload FROM outbox WHERE published = 0 "
                "ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
            return [
                OutboxMessage(
                    str(seq), str(eid), str(subj), bytes(data), trace_context=_trace_context(data)
                )
                for seq, eid, subj, data in rows
            ]

        return await self._db.read(work)

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        keys = [(int(message.key),) for message in messages]

        def work(connection: sqlite3.Connection) -> None:
            connection.executemany("UPDATE outbox SET published = 1 WHERE seq = ?", keys)

        await self._db.write(work)

    async def backlog(self, excluding: Collection[str] = ()) -> int:
        """Events not yet published, leaving out the messages whose keys are `excluding`
        (those of the batch under way already indexed), in one read."""
        seqs = [int(key) for key in excluding]

        def work(connection: sqlite3.Connection) -> int:
            marks = ",".join("?" * len(seqs))
            where = f" AND seq NOT IN ({marks})" if seqs else ""
            return int(
                connection.execute(
                    f"SELECT COUNT(*) FROM outbox WHERE published = 0{where}", seqs
                ).fetchone()[0]
            )

        return await self._db.read(work)

    async def oldest_pending(self) -> datetime | None:
        """When the oldest event not yet published (handed to the indexer and done) was
        recorded; None when every event is published."""

        def work(connection: sqlite3.Connection) -> datetime | None:
            row = connection.execute(
                "SELECT created_us FROM outbox WHERE published = 0 ORDER BY seq LIMIT 1"
            ).fetchone()
            return None if row is None else from_micros(int(row[0]))

        return await self._db.read(work)

    async def prune(self, before: datetime, *, limit: int) -> int:
        """Deletes at most `limit` published events recorded before `before`, oldest first,
        and remembers per space the newest position deleted (a feed cursor of that space
        below it has expired). Returns how many were deleted."""

        def work(connection: sqlite3.Connection) -> int:
            doomed = connection.execute(
                "SELECT seq, space_id FROM outbox WHERE published = 1 AND created_us < ? "
                "ORDER BY created_us LIMIT ?",
                (to_micros(before), limit),
            ).fetchall()
            newest: dict[str, int] = {}
            for seq, space_id in doomed:
                key = str(space_id or "")
                newest[key] = max(newest.get(key, 0), int(seq))
            connection.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s, _ in doomed])
            connection.executemany(
                "INSERT INTO outbox_retention (space_id, pruned_through) VALUES (?, ?) "
                "ON CONFLICT (space_id) DO UPDATE SET "
                "pruned_through = MAX(pruned_through, excluded.pruned_through)",
                list(newest.items()),
            )
            return len(doomed)

        return await self._db.write(work)
