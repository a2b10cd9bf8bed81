"""The SQLite outbox, in one place: its tables, the recording of each change's event in the
change's own transaction (`record_change`, `record_request`), and `SqliteOutbox`, which the
relay reads and clears. Published events are marked, not deleted: they stay for the change
feed until they are older than its retention, then `prune` removes them a bounded batch at
a time.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence
from datetime import datetime

from google.protobuf.message import DecodeError

from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.documents import REINDEX_EVENT_PREFIX, DocumentEvent
from engram.domain.outbox import OutboxMessage
from engram.v1 import events_pb2
from engram.wire import encode_event

OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id   TEXT    NOT NULL UNIQUE,
    subject    TEXT    NOT NULL,
    payload    BLOB    NOT NULL,
    created_us INTEGER NOT NULL,
    space_id   TEXT,
    published  INTEGER NOT NULL DEFAULT 0,
    trace      TEXT
);
CREATE TABLE IF NOT EXISTS outbox_retention (
    space_id       TEXT    PRIMARY KEY,
    pruned_through INTEGER NOT NULL
);
"""

# The change feed keeps published events: `space_id` ('' for reindex requests, which are no
# change) and `published` were added to the outbox, and `trace` (the write's trace context,
# JSON) after them, so databases made before get them here.
_OUTBOX_COLUMNS = {
    "space_id": "TEXT",
    "published": "INTEGER NOT NULL DEFAULT 0",
    "trace": "TEXT",
}
_OUTBOX_INDEXES = (
    "CREATE INDEX IF NOT EXISTS outbox_by_space ON outbox (space_id, seq)",
    "CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (seq) WHERE published = 0",
    "CREATE INDEX IF NOT EXISTS outbox_by_time ON outbox (created_us) WHERE published = 1",
)


def migrate_outbox(connection: sqlite3.Connection) -> None:
    """Adds the change feed's outbox columns and indexes to a database made before them, and
    files the events recorded then under their space (idempotent)."""
    present = {str(row[1]) for row in connection.execute("PRAGMA table_info(outbox)")}
    for column, kind in _OUTBOX_COLUMNS.items():
        if column not in present:
            connection.execute(f"ALTER TABLE outbox ADD COLUMN {column} {kind}")
    unfiled = connection.execute(
        "SELECT seq, event_id, payload FROM outbox WHERE space_id IS NULL"
    ).fetchall()
    connection.executemany(
        "UPDATE outbox SET space_id = ? WHERE seq = ?",
        [(_feed_space(str(eid), bytes(payload)), int(seq)) for seq, eid, payload in unfiled],
    )
    for statement in _OUTBOX_INDEXES:
        connection.execute(statement)


def _feed_space(event_id: str, payload: bytes) -> str:
    """The space an old outbox row belongs to in the feed ('' for a reindex request or a
    payload that does not decode: neither is a change)."""
    if event_id.startswith(REINDEX_EVENT_PREFIX):
        return ""
    try:
        return events_pb2.DocumentEvent.FromString(payload).space_id
    except DecodeError:
        return ""


def record_change(connection: sqlite3.Connection, event: DocumentEvent) -> None:
    """Records a change's event: published by the relay, then kept for the change feed."""
    _record(connection, event, feed_space=event.space_id)


def record_request(connection: sqlite3.Connection, event: DocumentEvent) -> None:
    """Records an event that is no change (a reindex request): the feed leaves it out."""
    _record(connection, event, feed_space="")


async def record_requests(database: SqliteDatabase, events: Sequence[DocumentEvent]) -> None:
    """Appends events to the outbox without changing a document: the indexer's reindex
    requests, which then travel the same durable path as changes."""

    def work(connection: sqlite3.Connection) -> None:
        for event in events:
            record_request(connection, event)

    await database.write(work)


def _record(connection: sqlite3.Connection, event: DocumentEvent, *, feed_space: str) -> None:
    trace = json.dumps(dict(event.trace_context)) if event.trace_context else None
    connection.execute(
        "INSERT INTO outbox (event_id, subject, payload, created_us, space_id, trace) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            event.event_id,
            event.subject,
            encode_event(event),
            to_micros(event.at),
            feed_space,
            trace,
        ),
    )


def _trace_context(trace: str | None, payload: bytes) -> tuple[tuple[str, str], ...]:
    """The trace context recorded with an event. Rows recorded before the `trace` column
    carry it only in their payload; () for one that does not decode (the consumer
    dead-letters it)."""
    if trace is not None:
        return tuple(sorted(json.loads(trace).items()))
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
                "SELECT seq, event_id, subject, payload, trace FROM outbox WHERE published = 0 "
                "ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
            return [
                OutboxMessage(
                    str(seq), str(eid), str(subj), bytes(data), _trace_context(trace, data)
                )
                for seq, eid, subj, data, trace in rows
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
