"""The embedded indexer's event feed: the outbox relay hands each batch of events to
`OutboxIndexHandler` and clears them only after it returned, so a crash re-delivers what was
not indexed, and a failure is retried with the relay's backoff. A document that fails
`max_attempts` times in a row is given up on (logged, counted as a dead letter) so it cannot
hold up every later change; `engram reindex` brings it back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from engram.domain.errors import EngramError, Unavailable
from engram.domain.spaces import SpaceRef
from engram.events.ports import OutboxMessage
from engram.events.relay import OutboxRelay
from engram.events.sqlite_outbox import SqliteOutbox
from engram.indexer.service import reindex_events
from engram.indexer.worker import (
    DEAD_LETTERS,
    DocumentKey,
    IndexWorker,
    UndecodableEvent,
    coalesce,
    event_documents,
    event_traces,
    observe_lag,
    read_event,
)
from engram.storage.sqlite_repository import SqliteDocumentRepository

log = logging.getLogger(__name__)


class OutboxIndexHandler:
    """The relay's subscriber: indexes the documents a batch of events names."""

    def __init__(self, worker: IndexWorker, *, max_attempts: int) -> None:
        self._worker = worker
        self._max_attempts = max_attempts
        # Consecutive failed attempts per document.
        self._attempts: dict[DocumentKey, int] = {}
        # Outbox keys of the batch under way whose documents are already indexed: the relay
        # marks a batch published only once all of it is done, so the backlog subtracts
        # these to move per document, not per batch.
        self._indexed_keys: set[str] = set()
        # Events indexed since start: only rises, its rate is the indexing rate.
        self.indexed_total = 0

    def indexed_in_flight(self) -> frozenset[str]:
        """Outbox keys (of messages not yet marked published) whose documents are indexed."""
        return frozenset(self._indexed_keys)

    async def __call__(self, messages: Sequence[OutboxMessage]) -> None:
        # The relay hands one batch at a time, after marking the previous one published.
        self._indexed_keys = set()
        events = []
        keys: dict[DocumentKey, list[str]] = {}
        for message in messages:
            try:
                event = read_event(message.payload)
                events.append(event)
                keys.setdefault((event.space_id, event.path), []).append(message.key)
            except UndecodableEvent as undecodable:
                DEAD_LETTERS.inc()
                log.error(
                    "outbox event dropped",
                    extra={"event_id": message.event_id, "error": undecodable.message},
                )
        groups = coalesce(events)

        def indexed(key: DocumentKey) -> None:
            done = keys.get(key, ())
            self._indexed_keys.update(done)
            self.indexed_total += len(done)

        results = await self._worker.index_many(
            ((group[0].space, path) for (_, path), group in groups.items()),
            traces={key: event_traces(group) for key, group in groups.items()},
            named={key: event_documents(group) for key, group in groups.items()},
            indexed=indexed,
        )
        retry: list[Exception] = []
        for key, error in results.items():
            if error is None:
                self._attempts.pop(key, None)
                observe_lag(groups[key])
                continue
            attempts = self._attempts.get(key, 0) + 1
            if attempts < self._max_attempts:
                self._attempts[key] = attempts
                retry.append(error)
                continue
            self._attempts.pop(key, None)
            DEAD_LETTERS.inc()
            log.error(
                "indexing a document failed too often; giving up until it changes or is reindexed",
                extra={
                    "space_id": key[0],
                    "path": key[1],
                    "attempts": attempts,
                    "error": str(error),
                },
            )
        if retry:
            first = retry[0]
            if isinstance(first, EngramError):
                raise first
            raise Unavailable(f"indexing failed: {type(first).__name__}: {first}")


class OutboxReindexQueue:
    """Queues reindex requests in the embedded outbox, the same durable path as changes."""

    def __init__(
        self, repository: SqliteDocumentRepository, relay: OutboxRelay, outbox: SqliteOutbox
    ) -> None:
        self._repository = repository
        self._relay = relay
        self._outbox = outbox

    async def enqueue(self, documents: Sequence[tuple[SpaceRef, str]]) -> None:
        await self._repository.record_events(reindex_events(documents))
        self._relay.changed()

    async def oldest_pending(self) -> datetime | None:
        # The relay marks events published only after the indexer's handler returned.
        return await self._outbox.oldest_pending()
