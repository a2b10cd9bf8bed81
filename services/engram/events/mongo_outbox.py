"""MongoOutbox: the event pointers MongoDocumentRepository records with every change.

The relay is fed from memory: the repository hands over each UPSERT or DELETE it commits
(with its head written), and `pending` returns those without a query. The outbox collection
is read when nothing waits in memory, when an erasure was committed (its event goes out
only once the erasure is finished), when memory overflowed, and at least every
OUTBOX_POLL_SECONDS under load, for what memory never held: another process's leftovers,
and pointers of a writer that crashed. Each read skips pointers younger than IN_FLIGHT
(writes still committing here or in another process, which their own relay publishes from
memory), so it neither looks up revisions still being written nor publishes an event a
second time; only the first read and those after an erasure or an overflow take them all.
Before an event read from the collection goes out its document head is rolled forward, so
a crash between a revision insert and its head update is repaired by the relay, not left
for good. A pointer stays in the collection until its event is published, memory or not,
so a crash loses nothing.

Published events' pointers are deleted together, at most every CLEAR_EVERY_SECONDS (and
whenever the backlog is counted): one command for the relay batches of that time instead
of one per batch, which at one write at a time was one command per write. Until then the
collection reads skip a published pointer, so it is not published again; after a crash
it is, and consumers tolerate that (JetStream drops the duplicate by its event id).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta
from itertools import islice
from typing import Any

from engram.events.ports import OutboxMessage
from engram.storage.mongo_repository import MongoDocumentRepository, revision_event
from engram.wire import encode_event

# Events held in memory at most (the oldest fall back to the outbox collection).
MEMORY_LIMIT = 10_000
# Under load, the outbox collection is still read at least this often ...
OUTBOX_POLL_SECONDS = 1.0
# ... for pointers at least this old.
IN_FLIGHT = timedelta(seconds=5)
# Published events' pointers are deleted at most this often (one command for all of them).
CLEAR_EVERY_SECONDS = 0.5


class MongoOutbox:
    def __init__(
        self,
        repository: MongoDocumentRepository,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._repository = repository
        self._clock = clock
        self._memory: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._look = True  # read the collection at the next `pending`
        self._looked_at = clock()
        # Published events whose pointers are not deleted yet.
        self._published: set[str] = set()
        self._cleared_at = clock()
        repository.on_commit(self._committed)

    def _committed(self, event_id: str, revision: dict[str, Any] | None) -> None:
        if revision is None:
            self._look = True
            return
        # The event needs no content: memory holds a few hundred bytes per event, however
        # large the document (while the broker is away, up to MEMORY_LIMIT of them).
        self._memory[event_id] = {key: value for key, value in revision.items() if key != "content"}
        if len(self._memory) > MEMORY_LIMIT:
            self._memory.popitem(last=False)
            self._look = True

    async def pending(self, limit: int) -> list[OutboxMessage]:
        await self._delete_published(now=False)
        found = list(islice(self._memory.items(), limit))
        now = self._clock()
        if len(found) < limit and (
            not found or self._look or now - self._looked_at >= OUTBOX_POLL_SECONDS
        ):
            min_age = None if self._look else IN_FLIGHT
            self._look, self._looked_at = False, now
            stored = await self._repository.pending_revisions(
                limit, skip=self._memory.keys() | self._published, min_age=min_age
            )
            found += stored[: limit - len(found)]
        messages: list[OutboxMessage] = []
        for event_id, revision in found:
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
        for message in messages:
            self._memory.pop(message.key, None)
            self._published.add(message.key)
        await self._delete_published(now=False)

    async def backlog(self) -> int:
        await self._delete_published(now=True)
        return await self._repository.outbox_backlog()

    async def _delete_published(self, *, now: bool) -> None:
        """Deletes the published events' pointers: `now`, or if CLEAR_EVERY_SECONDS have
        passed since the last delete. If that fails, they are deleted with the next."""
        if not self._published or (
            not now and self._clock() - self._cleared_at < CLEAR_EVERY_SECONDS
        ):
            return
        keys = list(self._published)
        await self._repository.clear_events(keys)
        self._cleared_at = self._clock()
        self._published.difference_update(keys)
