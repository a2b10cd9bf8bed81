"""MongoOutbox: the event pointers MongoDocumentRepository records with every change.

Before an event goes out its document head is rolled forward, so a crash between a
revision insert and its head update is repaired by the relay, not left for good.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram.events.ports import OutboxMessage
from engram.storage.mongo_repository import MongoDocumentRepository, revision_event
from engram.wire import encode_event


class MongoOutbox:
    def __init__(self, repository: MongoDocumentRepository) -> None:
        self._repository = repository

    async def pending(self, limit: int) -> list[OutboxMessage]:
        messages: list[OutboxMessage] = []
        for event_id, revision in await self._repository.pending_revisions(limit):
            event = revision_event(revision)
            messages.append(
                OutboxMessage(
                    key=event_id,
                    event_id=event_id,
                    subject=event.subject,
                    payload=encode_event(event),
                    trace_context=event.trace_context,
                )
            )
        return messages

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        await self._repository.clear_events([message.key for message in messages])

    async def backlog(self) -> int:
        return await self._repository.outbox_backlog()
