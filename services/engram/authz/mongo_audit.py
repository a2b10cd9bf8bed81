"""MongoAuditLog: audit rows for privileged changes, in MongoDB."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, IndexModel

from engram.authz.ports import AuditEntry
from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.domain.ports import AuditRecord


class MongoAuditLog:
    def __init__(self, database: MongoDatabase) -> None:
        self._events = database["audit_events"]

    async def ensure_indexes(self) -> None:
        await ensure_indexes(
            self._events, [IndexModel([("at", ASCENDING), ("_id", ASCENDING)], name="at")]
        )

    async def record(self, entry: AuditRecord) -> None:
        await self.append(entry, at=datetime.now(UTC))

    async def append(self, entry: AuditRecord, *, at: datetime) -> str:
        event_id = uuid.uuid4().hex
        with mongo_errors("recording an audit event"):
            await self._events.insert_one(
                {
                    "_id": event_id,
                    "action": entry.action,
                    "subject": entry.subject,
                    "tenant": entry.tenant,
                    "space_id": entry.space_id,
                    "path": entry.path,
                    "bytes_delta": entry.bytes_delta,
                    "at": at,
                }
            )
        return event_id

    async def list_since(self, since: datetime, *, after: str, limit: int) -> list[AuditEntry]:
        query: dict[str, Any] = {"at": {"$gte": since}}
        if after:
            stamp, _, event_id = after.partition("|")
            at = datetime.fromisoformat(stamp)
            query = {
                "$and": [
                    {"at": {"$gte": since}},
                    {"$or": [{"at": {"$gt": at}}, {"at": at, "_id": {"$gt": event_id}}]},
                ]
            }
        with mongo_errors("listing audit events"):
            rows = (
                await self._events.find(query)
                .sort([("at", 1), ("_id", 1)])
                .limit(limit)
                .to_list(length=limit)
            )
        return [
            AuditEntry(
                event_id=row["_id"],
                record=AuditRecord(
                    row["action"],
                    row["subject"],
                    row["tenant"],
                    row["space_id"],
                    row["path"],
                    row["bytes_delta"],
                ),
                at=row["at"],
                cursor=f"{row['at'].isoformat()}|{row['_id']}",
            )
            for row in rows
        ]
