"""MongoOutbox: pending events are the `pending` revisions MongoDocumentRepository inserts.

Before an event goes out its document head is rolled forward, so a crash between a
revision insert and its head update is repaired by the relay, not left for good.
"""

from __future__ import annotations

from collections.abc import Sequence

from bson import ObjectId

from engram.backends.mongo import MongoDatabase, mongo_errors
from engram.events.ports import OutboxMessage
from engram.storage.mongo_repository import MongoDocumentRepository, revision_event
from engram.wire import encode_event


class MongoOutbox:
    def __init__(self, database: MongoDatabase, repository: MongoDocumentRepository) -> None:
        self._revisions = database["revisions"]
        self._repository = repository

    async def pending(self, limit: int) -> list[OutboxMessage]:
        with mongo_errors("reading the outbox"):
            revisions = (
                await self._revisions.find({"pending": True})
                .sort("_id", 1)
                .limit(limit)
                .to_list(length=limit)
            )
        messages: list[OutboxMessage] = []
        for revision in revisions:
            await self._repository.apply_head(revision)
            event = revision_event(revision)
            messages.append(
                OutboxMessage(
                    key=str(revision["_id"]),
                    event_id=event.event_id,
                    subject=event.subject,
                    payload=encode_event(event),
                )
            )
        return messages

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        if not messages:
            return
        with mongo_errors("clearing the outbox"):
            await self._revisions.update_many(
                {"_id": {"$in": [ObjectId(message.key) for message in messages]}},
                {"$set": {"pending": False}},
            )

    async def backlog(self) -> int:
        with mongo_errors("counting the outbox"):
            return int(await self._revisions.count_documents({"pending": True}))
