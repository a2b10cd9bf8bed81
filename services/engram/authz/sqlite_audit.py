"""SqliteAuditLog: audit rows for privileged changes, in the embedded file."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime

from engram.authz.ports import AuditEntry
from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.ports import AuditRecord

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT    NOT NULL UNIQUE,
    action      TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    space_id    TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    bytes_delta INTEGER NOT NULL,
    at_us       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_by_time ON audit_events (at_us, seq);
"""


class SqliteAuditLog:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def record(self, entry: AuditRecord) -> None:
        await self.append(entry, at=datetime.now(UTC))

    async def append(self, entry: AuditRecord, *, at: datetime) -> str:
        event_id = uuid.uuid4().hex

        def work(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO audit_events (event_id, action, subject, tenant, space_id, path, "
                "bytes_delta, at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    entry.action,
                    entry.subject,
                    entry.tenant,
                    entry.space_id,
                    entry.path,
                    entry.bytes_delta,
                    to_micros(at),
                ),
            )

        await self._db.write(work)
        return event_id

    async def list_since(self, since: datetime, *, after: str, limit: int) -> list[AuditEntry]:
        after_seq = int(after) if after.isdigit() else 0

        def work(connection: sqlite3.Connection) -> list[AuditEntry]:
            rows = connection.execute(
                "SELECT seq, event_id, action, subject, tenant, space_id, path, bytes_delta, "
                "at_us FROM audit_events WHERE at_us >= ? AND seq > ? ORDER BY seq LIMIT ?",
                (to_micros(since), after_seq, limit),
            ).fetchall()
            return [
                AuditEntry(
                    event_id=str(eid),
                    record=AuditRecord(str(a), str(s), str(t), str(sp), str(p), int(d)),
                    at=from_micros(int(at)),
                    cursor=str(seq),
                )
                for seq, eid, a, s, t, sp, p, d, at in rows
            ]

        return await self._db.read(work)
