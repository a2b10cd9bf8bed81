"""MongoDocumentRepository: documents as per-path revision chains on MongoDB.

Each change to (space_id, path) inserts revision `rev + 1` into `revisions` under the _id
`<space_id>\\n<path>\\n<rev>`: exactly one writer can take an _id, so the insert is the
commit - on MongoDB and on FerretDB alike (FerretDB v1's updates are not atomic under
concurrency; inserts of a primary key are). Just before it, the change's event is
recorded in `outbox` under its event id, so the relay finds pending events without
scanning revisions; a pointer whose revision never landed is dropped by the relay.

`documents` holds one small head per path (live document or tombstone, no content) with
the latest revision number, for listing, export and usage. Heads are written after the
revision, guarded by `rev`; readers probe `rev + 1` by _id and roll a lagging head forward.
Reads, writes, deletes and version history use only _id lookups and inserts - FerretDB v1
serves nothing else without scanning a collection; listing, export and usage query
secondary indexes, which real MongoDB uses (FerretDB scans them).

Erasure (PurgeDocument) commits like any change: a content-free PURGE revision at `rev + 1`
with its outbox pointer. From that insert on the path reads as gone (no version is read past
a PURGE revision); then every earlier revision and its unpublished pointers are deleted. A
whole space (DeleteSpace) commits one SPACE_DELETE revision under the reserved empty path
`""`, then tombstones and erases each path the same way (without an event each). If the
process dies after the commit, the relay finishes the erasure before it publishes the event
(`finish_erasure`), and a repeated call finishes it too; until then reads already see
nothing of a purged path (of a deleted space: of the paths already tombstoned).

A write reads its path (`get`) and then saves it: the chain `get` found is reused by the
`save` that follows within CHAIN_REUSE instead of being read again (two `_id` lookups fewer
per write). Reusing it is as safe as reading it again: the commit is still the insert of
`rev + 1`, which fails if any writer got there first; only a writer committing more than
`retention` revisions of the path inside that window (whose pruning could free `rev + 1`)
could get past it, as with a head that lags by as much.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.mongo_batch import GroupedReplaces, GroupedWrites
from engram.domain.documents import (
    DocumentDeletion,
    DocumentEvent,
    DocumentHead,
    DocumentVersion,
    DocumentWrite,
    Erasure,
    ErasureResult,
    EventOp,
    PathEntry,
    SpaceSummary,
    SpaceUsage,
    StoredDocument,
)
from engram.domain.quotas import aggregate_owner
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.storage.ports import ConcurrentModification

UPSERT = "upsert"
DELETE = "delete"
# A content-free tombstone: everything at or before it is erased (or being erased).
PURGE = "purge"
# Under the reserved path "": the whole space was erased up to this revision's time.
SPACE_DELETE = "space_delete"
_OPS = {
    UPSERT: EventOp.UPSERT,
    DELETE: EventOp.DELETE,
    PURGE: EventOp.PURGE,
    SPACE_DELETE: EventOp.SPACE_DELETE,
}
# A tombstone insert lost to concurrent writes this many times in a row gives up (retry).
_TOMBSTONE_ATTEMPTS = 20
# An outbox pointer whose revision has not appeared after this long belongs to a write
# that lost its race or crashed before committing.
ABANDONED_POINTER = timedelta(seconds=60)
# How long a writer may take between its revision insert and its head update.
HEAD_GRACE = timedelta(seconds=5)
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
_HEAD_METADATA = ("sha256", "document_id", "created_at")

# Told of every announced change once it is committed and its head written: (event_id,
# revision) for an UPSERT or DELETE, whose event can go out as it is; (event_id, None) for
# an erasure, whose event must wait in the outbox until the erasure is finished.
CommitListener = Callable[[str, dict[str, Any] | None], None]

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
OUTBOX_INDEXES = [IndexModel([("at", ASCENDING)], name="at")]


def head_id(space_id: str, path: str) -> str:
    # Neither a space id nor a path may contain a newline.
    return f"{space_id}\n{path}"


def revision_id(space_id: str, path: str, rev: int) -> str:
    return f"{space_id}\n{path}\n{rev:012d}"


@dataclass(frozen=True, slots=True)
class _Chain:
    """Where a path's revision chain ends: its newest revision number and revision (read
    from a head by `head`: only the fields a commit reads, `op`, `version`, `created_at`)."""

    rev: int
    latest: dict[str, Any] | None

    @property
    def alive(self) -> bool:
        return self.latest is not None and self.latest["op"] == UPSERT


def _stored(revision: dict[str, Any]) -> StoredDocument:
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


def _head_of(head: dict[str, Any]) -> DocumentHead:
    return DocumentHead(
        space=parse_space_id(head["space_id"]),
        path=head["path"],
        sha256=head["sha256"],
        size_bytes=head["size_bytes"],
        version=head["version"],
        document_id=head["document_id"],
        created_at=head["created_at"],
    )


def _version(revision: dict[str, Any], *, with_content: bool, deleted: bool) -> DocumentVersion:
    return DocumentVersion(
        document_id=revision["document_id"],
        version=revision["version"],
        sha256=revision["sha256"],
        size_bytes=revision["size_bytes"],
        updated_at=revision["at"],
        updated_by=revision["by"],
        content=revision["content"] if with_content else "",
        deleted=deleted,
        seq=revision["rev"],
    )


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


def _trace_field(trace_context: tuple[tuple[str, str], ...]) -> dict[str, dict[str, str]]:
    """The revision's `trace` field (the write's trace context for its event), if any."""
    return {"trace": dict(trace_context)} if trace_context else {}


# Heads read per page while a space is erased.
_ERASE_PAGE = 500


def _erased(revisions: Sequence[dict[str, Any]], *, live: dict[str, Any] | None) -> ErasureResult:
    """What erasing one path removed: its revisions (the live one among them, if any)."""
    contents = sum(1 for r in revisions if r["op"] == UPSERT)
    if not revisions and live is None:
        return ErasureResult()
    return ErasureResult(
        paths=1,
        live_documents=1 if live is not None else 0,
        live_bytes=int(live["size_bytes"]) if live is not None else 0,
        versions=contents - (1 if live is not None else 0),
    )


def _sum(a: ErasureResult, b: ErasureResult) -> ErasureResult:
    return ErasureResult(
        paths=a.paths + b.paths,
        live_documents=a.live_documents + b.live_documents,
        live_bytes=a.live_bytes + b.live_bytes,
        versions=a.versions + b.versions,
    )


class MongoDocumentRepository:
    def __init__(self, database: MongoDatabase, *, retention: int) -> None:
        self._revisions = database["revisions"]
        self._heads = database["documents"]
        self._outbox = database["outbox"]
        self._retention = retention
        self._recent: OrderedDict[tuple[str, str], tuple[float, _Chain]] = OrderedDict()
        self._listeners: list[CommitListener] = []
        # Concurrent writes share commands (see backends/mongo_batch.py).
        self._pointer_inserts = GroupedWrites(self._outbox)
        self._revision_inserts = GroupedWrites(self._revisions)
        self._head_inserts = GroupedWrites(self._heads)
        self._head_replaces = GroupedReplaces(self._heads)

    def on_commit(self, listener: CommitListener) -> None:
        """Calls `listener` after each announced change is committed (see CommitListener):
        the outbox relay publishes from memory what it is told, and reads the outbox
        collection only for the rest (erasures, other processes' leftovers, crashes)."""
        self._listeners.append(listener)

    async def ensure_indexes(self) -> None:
        """Creates every index (idempotent; run at startup)."""
        await ensure_indexes(self._heads, HEAD_INDEXES)
        await ensure_indexes(self._outbox, OUTBOX_INDEXES)

    # --- the chain ---------------------------------------------------------------------------

    async def _revision(self, space_id: str, path: str, rev: int) -> dict[str, Any] | None:
        with mongo_errors("reading a revision"):
            revision: dict[str, Any] | None = await self._revisions.find_one(
                {"_id": revision_id(space_id, path, rev)}
            )
        return revision

    async def _chain(self, space_id: str, path: str, *, trust_head: bool = False) -> _Chain:
        """The newest revision: from the head, then probing `rev + 1` until a miss; with
        `trust_head`, the head's revision without the probe (see `get`)."""
        with mongo_errors("reading a document"):
            head = await self._heads.find_one(
                {"_id": head_id(space_id, path)}, projection={"rev": 1}
            )
        rev = int(head["rev"]) if head else 0
        advanced = False
        if trust_head:
            return _Chain(rev, await self._revision(space_id, path, rev) if rev else None)
        if rev:
            # The head's revision and the probe past it, in one round trip.
            latest, following = await asyncio.gather(
                self._revision(space_id, path, rev), self._revision(space_id, path, rev + 1)
            )
        else:
            latest, following = None, await self._revision(space_id, path, 1)
        while following is not None:
            latest, rev, advanced = following, rev + 1, True
            following = await self._revision(space_id, path, rev + 1)
        if advanced and latest is not None:
            await self._apply_head(latest)
        return _Chain(rev, latest)

    async def refresh(self, space_id: str, path: str) -> None:
        """Rolls the path's head forward to its newest revision (the relay calls this)."""
        await self._chain(space_id, path)

    async def _apply_head(self, revision: dict[str, Any]) -> None:
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
            head.update({field: revision[field] for field in _HEAD_METADATA})
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
        stale = rev - self._retention - 1
        if stale < 1:
            return
        revision = await self._revision(space_id, path, stale)
        with mongo_errors("pruning versions"):
            if revision is None or await self._outbox.find_one({"_id": revision["event_id"]}):
                return
            await self._revisions.delete_one({"_id": revision["_id"]})

    async def prune_versions(self, space_id: str) -> int:
        """Per path of the space (live or deleted), erases every revision older than the
        retention window `_prune` keeps, unless its event is still unpublished. Heads are
        read a page at a time; a lagging head only makes the window start lower."""
        pruned = 0
        after: str | None = None
        while True:
            query: dict[str, Any] = {"space_id": space_id}
            if after is not None:
                query["_id"] = {"$gt": after}
            with mongo_errors("pruning versions"):
                heads = (
                    await self._heads.find(query, projection={"path": 1, "rev": 1})
                    .sort("_id", ASCENDING)
                    .limit(PRUNE_PAGE)
                    .to_list(length=PRUNE_PAGE)
                )
            for head in heads:
                pruned += await self._prune_older(space_id, head["path"], int(head["rev"]))
            if len(heads) < PRUNE_PAGE:
                return pruned
            after = str(heads[-1]["_id"])

    async def _prune_older(self, space_id: str, path: str, rev: int) -> int:
        stale = rev - self._retention - 1
        if stale < 1:
            return 0
        window = {
            "$gte": revision_id(space_id, path, 1),
            "$lte": revision_id(space_id, path, stale),
        }
        with mongo_errors("pruning versions"):
            found = await self._revisions.find({"_id": window}, projection={"event_id": 1}).to_list(
                length=None
            )
            if not found:
                return 0
            pending = {
                pointer["_id"]
                async for pointer in self._outbox.find(
                    {"_id": {"$in": [r["event_id"] for r in found]}}, projection={"_id": 1}
                )
            }
            doomed = [r["_id"] for r in found if r["event_id"] not in pending]
            if not doomed:
                return 0
            result = await self._revisions.delete_many({"_id": {"$in": doomed}})
        return int(result.deleted_count)

    # --- reads -------------------------------------------------------------------------------

    def _remember(self, space_id: str, path: str, chain: _Chain) -> None:
        key = (space_id, path)
        self._recent.pop(key, None)
        self._recent[key] = (time.monotonic(), chain)
        if len(self._recent) > CHAIN_REUSE_SLOTS:
            self._recent.popitem(last=False)

    async def _chain_for_write(self, space_id: str, path: str) -> _Chain:
        """The chain `get` just read for this path (see the module docstring), else a read."""
        remembered = self._recent.pop((space_id, path), None)
        if remembered is not None and time.monotonic() - remembered[0] < CHAIN_REUSE:
            return remembered[1]
        return await self._chain(space_id, path)

    async def get(
        self, space_id: str, path: str, *, trust_head: bool = False
    ) -> StoredDocument | None:
        """The live document. With `trust_head`, the revision the path's head names, without
        probing past it: one `_id` lookup fewer (for a new path, one round trip fewer), but
        a revision another process has committed and not yet put in the head (its write in
        flight, or its writer dead before the head; the relay rolls such heads forward) is
        not seen. Only for a write's read: its commit inserts `rev + 1`, which fails on
        exactly that revision, and the write is then retried with a full read."""
        chain = await self._chain(space_id, path, trust_head=trust_head)
        self._remember(space_id, path, chain)
        return _stored(chain.latest) if chain.alive and chain.latest else None

    async def head(self, space_id: str, path: str) -> DocumentHead | None:
        """The live document's metadata from its head alone (one `_id` lookup): trusted
        like `get(trust_head=True)`, and kept for the `save` that follows."""
        with mongo_errors("reading a document"):
            head = await self._heads.find_one({"_id": head_id(space_id, path)})
        if head is None:
            self._remember(space_id, path, _Chain(0, None))
            return None
        op = head.get("op")
        if op is None or (op == UPSERT and any(field not in head for field in _HEAD_METADATA)):
            # A head written before heads carried the metadata: its revision has it.
            chain = _Chain(int(head["rev"]), await self._revision(space_id, path, int(head["rev"])))
            self._remember(space_id, path, chain)
            return _stored(chain.latest).head if chain.alive and chain.latest else None
        latest = {"op": op, "version": head["version"]}
        if op == UPSERT:
            latest["created_at"] = head["created_at"]
        self._remember(space_id, path, _Chain(int(head["rev"]), latest))
        return _head_of(head) if op == UPSERT else None

    async def get_many(self, space_id: str, paths: Sequence[str]) -> dict[str, StoredDocument]:
        found: dict[str, StoredDocument] = {}
        for path in paths:
            document = await self.get(space_id, path)
            if document is not None:
                found[path] = document
        return found

    async def _kept(
        self, space_id: str, path: str
    ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], bool]]]:
        """(newest revision, kept versions newest first with their `deleted` flag), walking
        the chain backwards by _id through the retention window."""
        chain = await self._chain(space_id, path)
        if chain.latest is None:
            return None, []
        kept: list[tuple[dict[str, Any], bool]] = []
        if chain.latest["op"] == PURGE:
            return chain.latest, kept  # erased: nothing before it is readable
        newer_op = chain.latest["op"]
        rev = chain.rev - 1
        floor = chain.rev - self._retention
        if chain.latest["op"] == DELETE:
            floor -= 1  # a deleted document's last version is a kept version
        while rev >= max(1, floor):
            revision = await self._revision(space_id, path, rev)
            if revision is None or revision["op"] == PURGE:
                break  # pruned or erased: nothing older is kept
            if revision["op"] == UPSERT:
                kept.append((revision, newer_op == DELETE))
            newer_op = revision["op"]
            rev -= 1
        return chain.latest, kept

    async def get_version(self, space_id: str, path: str, version: int) -> DocumentVersion | None:
        latest, kept = await self._kept(space_id, path)
        if latest is None:
            return None
        for revision, deleted in kept:
            if (
                revision["version"] == version
                and revision["document_id"] == (latest["document_id"])
            ):
                return _version(revision, with_content=True, deleted=deleted)
        return None

    async def list_versions(
        self, space_id: str, path: str, *, before_seq: int | None, limit: int
    ) -> list[DocumentVersion]:
        _, kept = await self._kept(space_id, path)
        versions = [
            _version(revision, with_content=False, deleted=deleted)
            for revision, deleted in kept
            if before_seq is None or revision["rev"] < before_seq
        ]
        return versions[:limit]

    async def list_paths(
        self, space_id: str, *, directory: str, start: str, inclusive: bool, limit: int
    ) -> list[PathEntry]:
        operator, lower = ("$gte" if inclusive else "$gt"), start
        bounds: dict[str, Any] = {}
        if directory:
            floor = directory + "/"
            if start < floor:
                operator, lower = "$gte", floor
            bounds["$lt"] = directory + "0"
        bounds[operator] = lower
        with mongo_errors("listing documents"):
            cursor = (
                self._heads.find(
                    {"space_id": space_id, "deleted": False, "path": bounds},
                    projection={"path": 1, "size_bytes": 1, "updated_at": 1},
                )
                .sort("path", ASCENDING)
                .limit(limit)
            )
            heads = await cursor.to_list(length=limit)
        return [PathEntry(h["path"], h["size_bytes"], h["updated_at"]) for h in heads]

    async def list_documents(
        self, space_id: str, *, after: str, limit: int
    ) -> list[StoredDocument]:
        with mongo_errors("exporting documents"):
            cursor = (
                self._heads.find(
                    {"space_id": space_id, "deleted": False, "path": {"$gt": after}},
                    projection={"path": 1},
                )
                .sort("path", ASCENDING)
                .limit(limit)
            )
            paths = [head["path"] for head in await cursor.to_list(length=limit)]
        documents: list[StoredDocument] = []
        for path in paths:
            document = await self.get(space_id, path)
            if document is not None:
                documents.append(document)
        return documents

    async def iter_paths(
        self, space_id: str | None = None, *, page_size: int = 1000
    ) -> AsyncIterator[tuple[str, str]]:
        """(space_id, path) of every live document of one space (or of all), in that order
        (head ids sort so), read a page at a time (the indexer's backfill)."""
        query: dict[str, Any] = {"deleted": False}
        if space_id is not None:
            query["space_id"] = space_id
        after: str | None = None
        while True:
            page = dict(query)
            if after is not None:
                page["_id"] = {"$gt": after}
            with mongo_errors("listing documents"):
                heads = (
                    await self._heads.find(page, projection={"space_id": 1, "path": 1})
                    .sort("_id", ASCENDING)
                    .limit(page_size)
                    .to_list(length=page_size)
                )
            for head in heads:
                yield str(head["space_id"]), str(head["path"])
            if len(heads) < page_size:
                return
            after = str(heads[-1]["_id"])

    async def space_usage(self, space_id: str) -> SpaceUsage:
        match = {"space_id": space_id, "deleted": False}
        with mongo_errors("summing usage"):
            count = await self._heads.count_documents(match)
            # One accumulator per $group: FerretDB v1 computes only the first.
            totals = await (
                await self._heads.aggregate(
                    [{"$match": match}, {"$group": {"_id": None, "used": {"$sum": "$size_bytes"}}}]
                )
            ).to_list(length=1)
        return SpaceUsage(used_bytes=int(totals[0]["used"]) if totals else 0, document_count=count)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        with mongo_errors("summing usage by space"):
            cursor = await self._heads.aggregate(
                [
                    {"$match": {"tenant": aggregate_owner, "deleted": False}},
                    {"$group": {"_id": "$space_id", "used": {"$sum": "$size_bytes"}}},
                ]
            )
            rows = await cursor.to_list(length=None)
        return {str(row["_id"]): int(row["used"]) for row in rows}

    async def list_spaces(
        self, aggregate_owner: str, *, after: str, limit: int
    ) -> list[SpaceSummary]:
        """One accumulator per $group and no $max: FerretDB v1 computes only the first
        accumulator and implements neither $max nor $last. So: the page of spaces with their
        counts, then their bytes, then each one's newest head."""
        match: dict[str, Any] = {"tenant": aggregate_owner, "deleted": False}
        with mongo_errors("listing spaces"):
            counted = await (
                await self._heads.aggregate(
                    [
                        {"$match": {**match, "space_id": {"$gt": after}}},
                        {"$group": {"_id": "$space_id", "count": {"$sum": 1}}},
                        {"$sort": {"_id": 1}},
                        {"$limit": limit},
                    ]
                )
            ).to_list(length=None)
            if not counted:
                return []
            ids = [str(row["_id"]) for row in counted]
            sized = await (
                await self._heads.aggregate(
                    [
                        {"$match": {**match, "space_id": {"$in": ids}}},
                        {"$group": {"_id": "$space_id", "used": {"$sum": "$size_bytes"}}},
                    ]
                )
            ).to_list(length=None)
            used = {str(row["_id"]): int(row["used"]) for row in sized}
            summaries: list[SpaceSummary] = []
            for row in counted:
                space_id = str(row["_id"])
                newest = await self._heads.find_one(
                    {**match, "space_id": space_id},
                    projection={"updated_at": 1},
                    sort=[("updated_at", -1)],
                )
                if newest is None:
                    continue  # emptied meanwhile
                summaries.append(
                    SpaceSummary(
                        space=parse_space_id(space_id),
                        document_count=int(row["count"]),
                        used_bytes=used.get(space_id, 0),
                        last_write_at=newest["updated_at"],
                    )
                )
        return summaries

    async def all_spaces(self, *, after: str, limit: int) -> list[SpaceRef]:
        with mongo_errors("listing every space"):
            cursor = await self._heads.aggregate(
                [
                    {"$match": {"deleted": False, "space_id": {"$gt": after}}},
                    {"$group": {"_id": "$space_id"}},
                    {"$sort": {"_id": 1}},
                    {"$limit": limit},
                ]
            )
            rows = await cursor.to_list(length=None)
        return [parse_space_id(str(row["_id"])) for row in rows]

    # --- changes -----------------------------------------------------------------------------

    async def save(self, change: DocumentWrite) -> StoredDocument:
        chain = await self._chain_for_write(change.space.id, change.path)
        latest = chain.latest
        if change.expected_version == 0 and chain.alive:
            raise ConcurrentModification(f"{change.path!r} was created concurrently")
        if change.expected_version != 0 and (
            not chain.alive or latest is None or latest["version"] != change.expected_version
        ):
            raise ConcurrentModification(f"{change.path!r} changed concurrently")
        created_at = latest["created_at"] if chain.alive and latest is not None else change.at
        await self._commit(
            {
                "_id": revision_id(change.space.id, change.path, chain.rev + 1),
                "space_id": change.space.id,
                "path": change.path,
                "rev": chain.rev + 1,
                "op": UPSERT,
                "document_id": change.document_id,
                "version": change.new_version,
                "content": change.content,
                "sha256": change.sha256,
                "size_bytes": change.size_bytes,
                "word_count": change.word_count,
                "created_at": created_at,
                "at": change.at,
                "by": change.by,
                "event_id": change.event_id,
                **_trace_field(change.trace_context),
            }
        )
        return change.stored(created_at=created_at)

    async def save_many(self, changes: Sequence[DocumentWrite]) -> list[StoredDocument]:
        """Without multi-document transactions: applies in order and, if one change loses a
        race, reverts the ones already applied before raising, so nothing stays half-done."""
        applied: list[tuple[DocumentWrite, StoredDocument | None]] = []
        stored: list[StoredDocument] = []
        try:
            for change in changes:
                previous = await self.get(change.space.id, change.path)
                stored.append(await self.save(change))
                applied.append((change, previous))
        except ConcurrentModification:
            for change, previous in reversed(applied):
                await self._revert(change, previous)
            raise
        return stored

    async def _revert(self, change: DocumentWrite, previous: StoredDocument | None) -> None:
        current = await self.get(change.space.id, change.path)
        if current is None or current.sha256 != change.sha256:
            return  # someone else changed it since; theirs stands
        if previous is None:
            await self.delete(
                DocumentDeletion(
                    space=change.space,
                    path=change.path,
                    expected_version=current.version,
                    document_id=current.document_id,
                    sha256=current.sha256,
                    size_bytes=current.size_bytes,
                    at=change.at,
                    by=change.by,
                    event_id=change.event_id + "-revert",
                )
            )
            return
        await self.save(
            DocumentWrite(
                space=change.space,
                path=change.path,
                content=previous.content,
                sha256=previous.sha256,
                size_bytes=previous.size_bytes,
                word_count=previous.word_count,
                expected_version=current.version,
                document_id=current.document_id,
                at=change.at,
                by=change.by,
                event_id=change.event_id + "-revert",
            )
        )

    async def delete(self, deletion: DocumentDeletion) -> None:
        chain = await self._chain_for_write(deletion.space.id, deletion.path)
        latest = chain.latest
        if not chain.alive or latest is None or latest["version"] != deletion.expected_version:
            raise ConcurrentModification(f"{deletion.path!r} changed concurrently")
        await self._commit(
            {
                "_id": revision_id(deletion.space.id, deletion.path, chain.rev + 1),
                "space_id": deletion.space.id,
                "path": deletion.path,
                "rev": chain.rev + 1,
                "op": DELETE,
                "document_id": deletion.document_id,
                "version": deletion.expected_version,
                "sha256": deletion.sha256,
                "size_bytes": deletion.size_bytes,
                "created_at": latest["created_at"],
                "at": deletion.at,
                "by": deletion.by,
                "event_id": deletion.event_id,
                **_trace_field(deletion.trace_context),
            }
        )

    async def _commit(self, revision: dict[str, Any], *, announce: bool = True) -> None:
        """Records the event pointer (unless `announce` is off: a space's per-path
        tombstones), then inserts the revision: the commit."""
        with mongo_errors("writing a document"):
            if announce:
                await self._pointer_inserts.insert(
                    {
                        "_id": revision["event_id"],
                        "revision": revision["_id"],
                        "at": datetime.now(UTC),
                    }
                )
            try:
                await self._revision_inserts.insert(revision)
            except DuplicateKeyError:
                if announce:
                    await self._outbox.delete_one({"_id": revision["event_id"]})
                raise ConcurrentModification(f"{revision['path']!r} changed concurrently") from None
        await asyncio.gather(
            self._apply_head(revision),
            self._prune(revision["space_id"], revision["path"], int(revision["rev"])),
        )
        if announce:
            fed = revision if revision["op"] in (UPSERT, DELETE) else None
            for listener in self._listeners:
                listener(revision["event_id"], fed)

    # --- erasure -----------------------------------------------------------------------------

    async def erase(self, erasure: Erasure) -> ErasureResult:
        if erasure.whole_space:
            return await self._erase_space(erasure)
        return await self._purge(erasure)

    async def _purge(self, erasure: Erasure) -> ErasureResult:
        space_id, path = erasure.space.id, erasure.path
        chain = await self._chain(space_id, path)
        latest = chain.latest
        if latest is None or latest["op"] == PURGE:
            # Nothing stored, or purged already: finish what a crash may have left.
            leftovers = await self._erase_below(space_id, path, chain.rev)
            return _erased(leftovers, live=None)
        live = latest if chain.alive else None
        await self._commit(self._tombstone(erasure, chain.rev + 1, latest, erasure.event_id))
        erased = await self._erase_below(space_id, path, chain.rev + 1)
        return _erased(erased, live=live)

    @staticmethod
    def _tombstone(
        erasure: Erasure, rev: int, latest: dict[str, Any] | None, event_id: str
    ) -> dict[str, Any]:
        """The content-free revision that erases `path` up to `rev` (or marks the space
        erased, under path ""), carrying the last state the path held for its event."""
        alive = latest is not None and latest["op"] == UPSERT
        path = erasure.path
        return {
            "_id": revision_id(erasure.space.id, path, rev),
            "space_id": erasure.space.id,
            "path": path,
            "rev": rev,
            "op": PURGE if path else SPACE_DELETE,
            "document_id": latest["document_id"] if latest else "",
            "version": latest["version"] if latest else 0,
            "sha256": latest["sha256"] if latest else "",
            "size_bytes": latest["size_bytes"] if alive and latest else 0,
            "created_at": latest["created_at"] if latest else erasure.at,
            "at": erasure.at,
            "by": erasure.by,
            "event_id": event_id,
            **_trace_field(erasure.trace_context),
        }

    async def _erase_below(self, space_id: str, path: str, rev: int) -> list[dict[str, Any]]:
        """Deletes every revision of the path before `rev`, and their unpublished event
        pointers (an erased change is never announced); returns what was deleted."""
        query = {
            "_id": {"$gt": revision_id(space_id, path, 0), "$lt": revision_id(space_id, path, rev)}
        }
        with mongo_errors("erasing versions"):
            found = await self._revisions.find(
                query, projection={"op": 1, "event_id": 1, "size_bytes": 1}
            ).to_list(length=None)
            if found:
                await self._outbox.delete_many(
                    {"_id": {"$in": [r["event_id"] for r in found if r.get("event_id")]}}
                )
                await self._revisions.delete_many({"_id": {"$in": [r["_id"] for r in found]}})
        return found

    async def _erase_space(self, erasure: Erasure) -> ErasureResult:
        space_id = erasure.space.id
        with mongo_errors("reading a space"):
            standing = await self._heads.find_one(
                {"space_id": space_id, "path": {"$ne": ""}, "op": {"$ne": PURGE}},
                projection={"_id": 1},
            )
        if standing is None:
            # Nothing stored, or erased already: finish what a crash may have left.
            marker = (await self._chain(space_id, "")).latest
            if marker is None:
                return ErasureResult()
            return await self._erase_paths(erasure.space.id, marker)
        for _ in range(_TOMBSTONE_ATTEMPTS):
            chain = await self._chain(space_id, "")
            marker = self._tombstone(erasure, chain.rev + 1, None, erasure.event_id)
            try:
                await self._commit(marker)
            except ConcurrentModification:
                continue  # another DeleteSpace of this space committed first
            return await self._erase_paths(space_id, marker)
        raise ConcurrentModification("the space was being deleted concurrently")

    async def finish_erasure(self, revision: dict[str, Any]) -> None:
        """Completes the erasure a PURGE or SPACE_DELETE revision committed (idempotent):
        the relay calls this before publishing its event, so a crash in between is
        finished within a relay pass."""
        if revision["op"] == PURGE:
            await self._erase_below(revision["space_id"], revision["path"], int(revision["rev"]))
        elif revision["op"] == SPACE_DELETE:
            await self._erase_paths(revision["space_id"], revision)

    async def _erase_paths(self, space_id: str, marker: dict[str, Any]) -> ErasureResult:
        """Tombstones and erases every path of the space last changed at or before the
        marker (a path written after it keeps that write); a page of heads at a time."""
        total = ErasureResult()
        after = head_id(space_id, "")
        while True:
            with mongo_errors("listing a space"):
                heads = (
                    await self._heads.find(
                        {"space_id": space_id, "_id": {"$gt": after}}, projection={"path": 1}
                    )
                    .sort("_id", ASCENDING)
                    .limit(_ERASE_PAGE)
                    .to_list(length=_ERASE_PAGE)
                )
            for head in heads:
                total = _sum(total, await self._erase_path(space_id, head["path"], marker))
            if len(heads) < _ERASE_PAGE:
                return total
            after = heads[-1]["_id"]

    async def _erase_path(self, space_id: str, path: str, marker: dict[str, Any]) -> ErasureResult:
        space = parse_space_id(space_id)
        for _ in range(_TOMBSTONE_ATTEMPTS):
            chain = await self._chain(space_id, path)
            latest = chain.latest
            if latest is None or latest["op"] == PURGE:
                return _erased(await self._erase_below(space_id, path, chain.rev), live=None)
            if latest["at"] > marker["at"]:
                return ErasureResult()  # written after the space was deleted
            erasure = Erasure(space=space, path=path, at=marker["at"], by=marker["by"], event_id="")
            # Per-path tombstones of a space erasure record no event of their own.
            tombstone = self._tombstone(
                erasure, chain.rev + 1, latest, f"{marker['event_id']}:{chain.rev + 1}"
            )
            try:
                await self._commit(tombstone, announce=False)
            except ConcurrentModification:
                continue
            erased = await self._erase_below(space_id, path, chain.rev + 1)
            return _erased(erased, live=latest if chain.alive else None)
        raise ConcurrentModification(f"{path!r} kept changing while its space was deleted")

    # --- the outbox --------------------------------------------------------------------------

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
            pointers = (
                await self._outbox.find({}).sort("at", ASCENDING).limit(limit).to_list(length=limit)
            )
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
                *(self._revisions.find_one({"_id": revision_id}) for revision_id in wanted)
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
            await self.refresh(space_id, path)
        for _, revision in found:
            if revision["op"] in (PURGE, SPACE_DELETE):
                await self.finish_erasure(revision)
        return found

    async def _heads_behind(self, revisions: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
        """The (space_id, path)s among `revisions` whose head is older than the revision."""
        if not revisions:
            return []
        keys = {head_id(r["space_id"], r["path"]): r for r in revisions}
        with mongo_errors("reading document heads"):
            heads = {
                head["_id"]: int(head["rev"])
                async for head in self._heads.find(
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
        with mongo_errors("clearing the outbox"):
            await self._outbox.delete_many({"_id": {"$in": list(event_ids)}})

    async def outbox_backlog(self) -> int:
        with mongo_errors("counting the outbox"):
            return int(await self._outbox.count_documents({}))
