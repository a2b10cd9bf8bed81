"""The Mongo outbox, in one place: the event pointer every change records beside its
revision (`OutboxPointers`), the reading of pending events back with their revisions
(`PendingRevisions`), the DocumentEvent a revision announces (`revision_event`), and the
relay's view of it all (`MongoOutbox`).

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

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Protocol

from pymongo import ASCENDING, IndexModel

from engram.backends.mongo import MongoCollection, ensure_indexes, mongo_errors
from engram.backends.mongo_batch import GroupedWrites
from engram.domain.documents import DocumentEvent, EventOp
from engram.domain.outbox import OutboxMessage
from engram.domain.spaces import parse_space_id
from engram.storage.mongo.records import DELETE, PURGE, SPACE_DELETE, UPSERT, head_id
from engram.wire import encode_event

OUTBOX_INDEXES = [IndexModel([("at", ASCENDING)], name="at")]
# An outbox pointer whose revision has not appeared after this long belongs to a write
# that lost its race or crashed before committing.
ABANDONED_POINTER = timedelta(seconds=60)
# How long a writer may take between its revision insert and its head update.
HEAD_GRACE = timedelta(seconds=5)
_OPS = {
    UPSERT: EventOp.UPSERT,
    DELETE: EventOp.DELETE,
    PURGE: EventOp.PURGE,
    SPACE_DELETE: EventOp.SPACE_DELETE,
}

# Told of every announced change once it is committed and its head written: (event_id,
# revision) for an UPSERT or DELETE, whose event can go out as it is; (event_id, None) for
# an erasure, whose event must wait in the outbox until the erasure is finished.
CommitListener = Callable[[str, dict[str, Any] | None], None]


def revision_event(revision: dict[str, Any]) -> DocumentEvent:
    """The DocumentEvent a revision records (the outbox payload)."""
    return DocumentEvent(
        event_id=revision["event_id"],
        space=parse_space_id(revision["space_id"]),
        path=revision["path"],
        op=_OPS[revision["op"]],
        version=revision["version"],
        sha256=revision["sha256"],
        size_bytes=revision["size_bytes"],
        at=revision["at"],
        document_id=revision["document_id"],
        trace_context=tuple(sorted(revision.get("trace", {}).items())),
    )


class OutboxPointers:
    """The `outbox` collection: one pointer (event id -> revision id) per announced change,
    recorded just before its revision is inserted and deleted once its event is out."""

    def __init__(self, collection: MongoCollection) -> None:
        self._outbox = collection
        # Concurrent writes share commands (see backends/mongo_batch.py).
        self._inserts = GroupedWrites(collection)

    async def ensure_indexes(self) -> None:
        await ensure_indexes(self._outbox, OUTBOX_INDEXES)

    async def record(self, revision: dict[str, Any]) -> None:
        """Records the pointer of the revision about to be inserted."""
        await self._inserts.insert(
            {"_id": revision["event_id"], "revision": revision["_id"], "at": datetime.now(UTC)}
        )

    async def drop(self, event_id: str) -> None:
        await self._outbox.delete_one({"_id": event_id})

    async def is_pending(self, event_id: str) -> bool:
        return await self._outbox.find_one({"_id": event_id}) is not None

    async def pending_among(self, event_ids: Sequence[str]) -> set[str]:
        """Those of `event_ids` whose events are still unpublished."""
        return {
            pointer["_id"]
            async for pointer in self._outbox.find(
                {"_id": {"$in": list(event_ids)}}, projection={"_id": 1}
            )
        }

    async def drop_many(self, event_ids: Sequence[str]) -> None:
        if not event_ids:
            return
        with mongo_errors("clearing the outbox"):
            await self._outbox.delete_many({"_id": {"$in": list(event_ids)}})

    async def oldest(self, limit: int) -> list[dict[str, Any]]:
        pointers: list[dict[str, Any]] = (
            await self._outbox.find({}).sort("at", ASCENDING).limit(limit).to_list(length=limit)
        )
        return pointers

    async def count(self) -> int:
        with mongo_errors("counting the outbox"):
            return int(await self._outbox.count_documents({}))


class Chains(Protocol):
    """What reading pending events needs of the revision chains."""

    @property
    def revisions(self) -> MongoCollection: ...

    @property
    def heads(self) -> MongoCollection: ...

    async def refresh(self, space_id: str, path: str) -> None: ...


class PendingRevisions:
    """Recorded, unpublished events read back with their revisions (see pending_revisions)."""

    def __init__(
        self,
        pointers: OutboxPointers,
        chains: Chains,
        finish_erasure: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        self._pointers = pointers
        self._chains = chains
        self._finish_erasure = finish_erasure

    async def pending_revisions(
        self, limit: int, *, skip: Collection[str] = (), min_age: timedelta | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """(event_id, revision) for recorded, unpublished events, oldest first, except the
        event ids in `skip` (the relay has them from memory already) and, with `min_age`,
        pointers younger than that (most likely writes still in flight); drops
        pointers whose revision never landed. The writer updates the head right after its
        revision; a pointer older than HEAD_GRACE whose head is still behind its revision
        means the writer may have crashed in between, so that path's head is rolled forward
        here. A batch costs one outbox query and one `_id` lookup per pointer, run
        concurrently: an `_id` lookup is indexed on MongoDB and on FerretDB's PostgreSQL
        handler (deploy/local adds the index its `@>` filter can use), while FerretDB v1
        pushes no `$in` down, so one `$in` query decoded every revision ever written, for
        every batch. (FerretDB's SQLite handler scans a collection per query whatever the
        filter: there a batch costs one scan per pointer.)"""
        with mongo_errors("reading the outbox"):
            pointers = await self._pointers.oldest(limit)
            recorded_before = datetime.now(UTC) - (min_age or timedelta(0))
            pointers = [
                pointer
                for pointer in pointers
                if pointer["_id"] not in skip
                and (min_age is None or pointer["at"] <= recorded_before)
            ]
            if not pointers:
                return []
            wanted = list(dict.fromkeys(pointer["revision"] for pointer in pointers))
            looked_up = await asyncio.gather(
                *(self._chains.revisions.find_one({"_id": revision_id}) for revision_id in wanted)
            )
            revisions = {
                revision["_id"]: revision for revision in looked_up if revision is not None
            }
        found: list[tuple[str, dict[str, Any]]] = []
        orphans: list[str] = []
        aged: list[dict[str, Any]] = []
        now = datetime.now(UTC)
        for pointer in pointers:
            revision = revisions.get(pointer["revision"])
            if revision is None or revision["event_id"] != pointer["_id"]:
                if revision is not None or now - pointer["at"] > ABANDONED_POINTER:
                    orphans.append(pointer["_id"])
                continue
            found.append((pointer["_id"], revision))
            if now - pointer["at"] > HEAD_GRACE:
                aged.append(revision)
        if orphans:
            await self.clear_events(orphans)
        for space_id, path in await self._heads_behind(aged):
            await self._chains.refresh(space_id, path)
        for _, revision in found:
            if revision["op"] in (PURGE, SPACE_DELETE):
                await self._finish_erasure(revision)
        return found

    async def _heads_behind(self, revisions: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """The (space_id, path)s among `revisions` whose head is older than the revision."""
        if not revisions:
            return []
        keys = {head_id(r["space_id"], r["path"]): r for r in revisions}
        with mongo_errors("reading document heads"):
            heads = {
                head["_id"]: int(head["rev"])
                async for head in self._chains.heads.find(
                    {"_id": {"$in": list(keys)}}, projection={"rev": 1}
                )
            }
        behind: dict[str, tuple[str, str]] = {}
        for key, revision in keys.items():
            if heads.get(key, 0) < int(revision["rev"]):
                behind[key] = (revision["space_id"], revision["path"])
        return list(behind.values())

    async def clear_events(self, event_ids: Sequence[str]) -> None:
        if not event_ids:
            return
        await self._pointers.drop_many(event_ids)

    async def backlog(self) -> int:
        return await self._pointers.count()


class PendingSource(Protocol):
    """What the relay's outbox needs of the repository."""

    def on_commit(self, listener: CommitListener) -> None: ...

    async def pending_revisions(
        self, limit: int, *, skip: Collection[str] = (), min_age: timedelta | None = None
    ) -> list[tuple[str, dict[str, Any]]]: ...

    async def clear_events(self, event_ids: Sequence[str]) -> None: ...

    async def outbox_backlog(self) -> int: ...


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
        repository: PendingSource,
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
