"""SqliteOutbox: the `outbox` table SqliteDocumentRepository appends to in each change."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from engram.backends.sqlite import SqliteDatabase
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
                "SELECT seq, event_id, subject, payload FROM outbox ORDER BY seq LIMIT ?",
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
            connection.executemany("DELETE FROM outbox WHERE seq = ?", keys)

        await self._db.write(work)

    async def backlog(self) -> int:
        def work(connection: sqlite3.Connection) -> int:
            return int(connection.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])

        return await self._db.read(work)
