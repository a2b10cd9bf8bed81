"""The holder every Mongo storage room shares: the collections, and the per-path revision
chain (reading its end, committing the next revision, keeping its head and retention)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.mongo_batch import GroupedReplaces, GroupedWrites
from engram.domain.documents import DocumentHead, StoredDocument
from engram.domain.quotas import aggregate_owner
from engram.domain.spaces import parse_space_id
from engram.storage.mongo.outbox import CommitListener, OutboxPointers
from engram.storage.mongo.records import DELETE, UPSERT, head_id, revision_id
from engram.storage.ports import ConcurrentModification

# Document heads read at a time when pruning a space's versions.
PRUNE_PAGE = 500
# How long (seconds) a chain read by `get` may be reused by the `save` of the same path. A
# write's quota charge sits between the two, and under load it queues behind the charges on
# the same counters (at 0.5 s, most writes at concurrency 16 read their chain twice).
CHAIN_REUSE = 2.0
# Chains kept for reuse (oldest dropped first).
CHAIN_REUSE_SLOTS = 4096
# A live document's head carries these fields of its revision besides `version` and
# `size_bytes` (heads written before it did lack them and are read with their revision).
HEAD_METADATA = ("sha256", "document_id", "created_at")

HEAD_INDEXES = [
    IndexModel(
        [("space_id", ASCENDING), ("deleted", ASCENDING), ("path", ASCENDING)],
        name="space_live_path",
    ),
    IndexModel(
        [("tenant", ASCENDING), ("deleted", ASCENDING), ("space_id", ASCENDING)],
        name="tenant_live_space",
    ),
]


@dataclass(frozen=True, slots=True)
class Chain:
    """Where a path's revision chain ends: its newest revision number and revision (read
    from a head by `head`: only the fields a commit reads, `op`, `version`, `created_at`)."""

    rev: int
    latest: dict[str, Any] | None

    @property
    def alive(self) -> bool:
        return self.latest is not None and self.latest["op"] == UPSERT


def stored(revision: dict[str, Any]) -> StoredDocument:
    return StoredDocument(
        space=parse_space_id(revision["space_id"]),
        path=revision["path"],
        content=revision["content"],
        sha256=revision["sha256"],
        size_bytes=revision["size_bytes"],
        word_count=revision["word_count"],
        version=revision["version"],
        document_id=revision["document_id"],
        created_at=revision["created_at"],
        updated_at=revision["at"],
        updated_by=revision["by"],
    )


def head_of(head: dict[str, Any]) -> DocumentHead:
    return DocumentHead(
        space=parse_space_id(head["space_id"]),
        path=head["path"],
        sha256=head["sha256"],
        size_bytes=head["size_bytes"],
        version=head["version"],
        document_id=head["document_id"],
        created_at=head["created_at"],
    )


def _trace_field(trace_context: tuple[tuple[str, str], ...]) -> dict[str, dict[str, str]]:
    """The revision's `trace` field (the write's trace context for its event), if any."""
    return {"trace": dict(trace_context)} if trace_context else {}


class MongoChains:
    def __init__(self, database: MongoDatabase, *, retention: int) -> None:
        self.revisions = database["revisions"]
        self.heads = database["documents"]
        self.pointers = OutboxPointers(database["outbox"])
        self.retention = retention
        self._recent: OrderedDict[tuple[str, str], tuple[float, Chain]] = OrderedDict()
        self._listeners: list[CommitListener] = []
        # Concurrent writes share commands (see backends/mongo_batch.py).
        self._revision_inserts = GroupedWrites(self.revisions)
        self._head_inserts = GroupedWrites(self.heads)
        self._head_replaces = GroupedReplaces(self.heads)

    def on_commit(self, listener: CommitListener) -> None:
        """Calls `listener` after each announced change is committed (see CommitListener):
        the outbox relay publishes from memory what it is told, and reads the outbox
        collection only for the rest (erasures, other processes' leftovers, crashes)."""
        self._listeners.append(listener)

    async def ensure_indexes(self) -> None:
        """Creates every index (idempotent; run at startup)."""
        await ensure_indexes(self.heads, HEAD_INDEXES)
        await self.pointers.ensure_indexes()

    async def revision(self, space_id: str, path: str, rev: int) -> dict[str, Any] | None:
        with mongo_errors("reading a revision"):
            revision: dict[str, Any] | None = await self.revisions.find_one(
                {"_id": revision_id(space_id, path, rev)}
            )
        return revision

    async def chain(self, space_id: str, path: str, *, trust_head: bool = False) -> Chain:
        """The newest revision: from the head, then probing `rev + 1` until a miss; with
        `trust_head`, the head's revision without the probe (see `get`)."""
        with mongo_errors("reading a document"):
            head = await self.heads.find_one(
                {"_id": head_id(space_id, path)}, projection={"rev": 1}
            )
        rev = int(head["rev"]) if head else 0
        advanced = False
        if trust_head:
            return Chain(rev, await self.revision(space_id, path, rev) if rev else None)
        if rev:
            # The head's revision and the probe past it, in one round trip.
            latest, following = await asyncio.gather(
                self.revision(space_id, path, rev), self.revision(space_id, path, rev + 1)
            )
        else:
            latest, following = None, await self.revision(space_id, path, 1)
        while following is not None:
            latest, rev, advanced = following, rev + 1, True
            following = await self.revision(space_id, path, rev + 1)
        if advanced and latest is not None:
            await self.apply_head(latest)
        return Chain(rev, latest)

    async def refresh(self, space_id: str, path: str) -> None:
        """Rolls the path's head forward to its newest revision (the relay calls this)."""
        await self.chain(space_id, path)

    async def apply_head(self, revision: dict[str, Any]) -> None:
        """Writes the head for `revision` unless a newer head is in place. Heads stay small
        (no content): FerretDB v1 decodes every document of a collection on each update."""
        deleted = revision["op"] != UPSERT
        head: dict[str, Any] = {
            "space_id": revision["space_id"],
            "path": revision["path"],
            "rev": revision["rev"],
            "op": revision["op"],
            "tenant": aggregate_owner(parse_space_id(revision["space_id"])),
            "deleted": deleted,
            "version": revision["version"],
            "updated_at": revision["at"],
            "size_bytes": 0 if deleted else revision["size_bytes"],
        }
        if not deleted:
            # What a replace decides on, so that its read is this head alone (`head`).
            head.update({field: revision[field] for field in HEAD_METADATA})
        key = head_id(revision["space_id"], revision["path"])
        with mongo_errors("updating a document head"):
            if revision["rev"] == 1:
                # A new path has no head yet: an insert, which shares a command with
                # concurrent writes' (an update cannot); if one is there, it is newer or the
                # same revision's, written by a repair, and the guarded replace below keeps it.
                with contextlib.suppress(DuplicateKeyError):
                    await self._head_inserts.insert({"_id": key, **head})
                    return
            try:
                await self._head_replaces.replace(
                    {"_id": key, "rev": {"$lt": revision["rev"]}}, head
                )
            except DuplicateKeyError:
                pass  # a newer head (or this one) is already in place

    async def _prune(self, space_id: str, path: str, rev: int) -> None:
        """Removes the revision that just left the retention window (the current revision and
        `retention` earlier ones), unless its event is unpublished: it carries the payload."""
        stale = rev - self.retention - 1
        if stale < 1:
            return
        revision = await self.revision(space_id, path, stale)
        with mongo_errors("pruning versions"):
            if revision is None or await self.pointers.is_pending(revision["event_id"]):
                return
            await self.revisions.delete_one({"_id": revision["_id"]})

    def remember(self, space_id: str, path: str, chain: Chain) -> None:
        key = (space_id, path)
        self._recent.pop(key, None)
        self._recent[key] = (time.monotonic(), chain)
        if len(self._recent) > CHAIN_REUSE_SLOTS:
            self._recent.popitem(last=False)

    async def chain_for_write(self, space_id: str, path: str) -> Chain:
        """The chain `get` just read for this path (see the module docstring), else a read."""
        remembered = self._recent.pop((space_id, path), None)
        if remembered is not None and time.monotonic() - remembered[0] < CHAIN_REUSE:
            return remembered[1]
        return await self.chain(space_id, path)

    async def get(
        self, space_id: str, path: str, *, trust_head: bool = False
    ) -> StoredDocument | None:
        """The live document. With `trust_head`, the revision the path's head names, without
        probing past it: one `_id` lookup fewer (for a new path, one round trip fewer), but
        a revision another process has committed and not yet put in the head (its write in
        flight, or its writer dead before the head; the relay rolls such heads forward) is
        not seen. Only for a write's read: its commit inserts `rev + 1`, which fails on
        exactly that revision, and the write is then retried with a full read."""
        chain = await self.chain(space_id, path, trust_head=trust_head)
        self.remember(space_id, path, chain)
        return stored(chain.latest) if chain.alive and chain.latest else None

    async def commit(self, revision: dict[str, Any], *, announce: bool = True) -> None:
        """Records the event pointer (unless `announce` is off: a space's per-path
        tombstones), then inserts the revision: the commit."""
        with mongo_errors("writing a document"):
            if announce:
                await self.pointers.record(revision)
            try:
                await self._revision_inserts.insert(revision)
            except DuplicateKeyError:
                if announce:
                    await self.pointers.drop(revision["event_id"])
                raise ConcurrentModification(f"{revision['path']!r} changed concurrently") from None
        await asyncio.gather(
            self.apply_head(revision),
            self._prune(revision["space_id"], revision["path"], int(revision["rev"])),
        )
        if announce:
            fed = revision if revision["op"] in (UPSERT, DELETE) else None
            for listener in self._listeners:
                listener(revision["event_id"], fed)
