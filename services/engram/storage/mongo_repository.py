"""MongoDocumentRepository: documents as per-path revision chains on MongoDB.

Each change to (space_id, path) inserts revision `rev + 1` into `revisions`, whose unique
index (space_id, path, rev) lets exactly one writer win: the insert is the commit. It is
a single-document write, so the document change and its pending event (the outbox) are
recorded atomically, on MongoDB and on FerretDB alike (FerretDB's updates are not atomic
under concurrency; unique inserts are). The current document is the newest revision.

`documents` holds one head per path (live document or tombstone) for listing, export and
usage. Heads are written after the revision, guarded by `rev`, and rolled forward by the
outbox relay, so a crash between the two never leaves a head behind for long.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, mongo_errors
from engram.domain.documents import (
    DocumentDeletion,
    DocumentEvent,
    DocumentVersion,
    DocumentWrite,
    EventOp,
    PathEntry,
    SpaceUsage,
    StoredDocument,
)
from engram.domain.quotas import aggregate_owner
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.storage.ports import ConcurrentModification

UPSERT = "upsert"
DELETE = "delete"

REVISION_INDEXES = [
    IndexModel(
        [("space_id", ASCENDING), ("path", ASCENDING), ("rev", ASCENDING)],
        unique=True,
        name="path_rev",
    ),
    IndexModel([("pending", ASCENDING)], name="pending"),
    IndexModel(
        [
            ("space_id", ASCENDING),
            ("path", ASCENDING),
            ("document_id", ASCENDING),
            ("version", ASCENDING),
        ],
        name="document_version",
    ),
]
HEAD_INDEXES = [
    IndexModel([("space_id", ASCENDING), ("path", ASCENDING)], unique=True, name="space_path"),
    IndexModel([("tenant", ASCENDING), ("space_id", ASCENDING)], name="tenant_space"),
]


def head_id(space_id: str, path: str) -> str:
    # Neither a space id nor a path may contain a newline.
    return f"{space_id}\n{path}"


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


def revision_event(revision: dict[str, Any]) -> DocumentEvent:
    """The DocumentEvent a revision records (the outbox payload)."""
    return DocumentEvent(
        event_id=revision["event_id"],
        space=parse_space_id(revision["space_id"]),
        path=revision["path"],
        op=EventOp.UPSERT if revision["op"] == UPSERT else EventOp.DELETE,
        version=revision["version"],
        sha256=revision["sha256"],
        size_bytes=revision["size_bytes"],
        at=revision["at"],
        document_id=revision["document_id"],
    )


class MongoDocumentRepository:
    def __init__(self, database: MongoDatabase, *, retention: int) -> None:
        self._revisions = database["revisions"]
        self._heads = database["documents"]
        self._retention = retention

    async def ensure_indexes(self) -> None:
        """Creates every index (idempotent; run at startup)."""
        with mongo_errors("creating document indexes"):
            await self._revisions.create_indexes(REVISION_INDEXES)
            await self._heads.create_indexes(HEAD_INDEXES)

    # --- reads -------------------------------------------------------------------------------

    async def _latest(self, space_id: str, path: str) -> dict[str, Any] | None:
        with mongo_errors("reading a document"):
            revision: dict[str, Any] | None = await self._revisions.find_one(
                {"space_id": space_id, "path": path}, sort=[("rev", DESCENDING)]
            )
        return revision

    async def get(self, space_id: str, path: str) -> StoredDocument | None:
        latest = await self._latest(space_id, path)
        if latest is None or latest["op"] != UPSERT:
            return None
        return _stored(latest)

    async def get_many(self, space_id: str, paths: Sequence[str]) -> dict[str, StoredDocument]:
        found: dict[str, StoredDocument] = {}
        for path in paths:
            document = await self.get(space_id, path)
            if document is not None:
                found[path] = document
        return found

    async def get_version(self, space_id: str, path: str, version: int) -> DocumentVersion | None:
        latest = await self._latest(space_id, path)
        if latest is None:
            return None
        floor = await self._retention_floor(latest)
        with mongo_errors("reading a kept version"):
            revision = await self._revisions.find_one(
                {
                    "space_id": space_id,
                    "path": path,
                    "document_id": latest["document_id"],
                    "version": version,
                    "op": UPSERT,
                    "rev": {"$gte": floor},
                },
                sort=[("rev", DESCENDING)],
            )
        if revision is None:
            return None
        deleted = latest["op"] == DELETE and latest["version"] == version
        return _version(revision, with_content=True, deleted=deleted)

    async def list_versions(
        self, space_id: str, path: str, *, before_seq: int | None, limit: int
    ) -> list[DocumentVersion]:
        latest = await self._latest(space_id, path)
        if latest is None:
            return []
        query: dict[str, Any] = {
            "space_id": space_id,
            "path": path,
            "rev": {"$gte": await self._retention_floor(latest)},
        }
        if before_seq is not None:
            # Include the last revision already returned: its op decides the next flag.
            query["rev"]["$lte"] = before_seq
        with mongo_errors("listing versions"):
            cursor = self._revisions.find(query, projection={"content": 0}).sort("rev", DESCENDING)
            revisions = await cursor.to_list(length=limit * 2 + 2)
        versions: list[DocumentVersion] = []
        newer_op: str | None = None
        for index, revision in enumerate(revisions):
            is_boundary = before_seq is not None and revision["rev"] == before_seq
            is_current = before_seq is None and index == 0 and revision["op"] == UPSERT
            if revision["op"] == UPSERT and not is_boundary and not is_current:
                versions.append(_version(revision, with_content=False, deleted=newer_op == DELETE))
                if len(versions) == limit:
                    break
            newer_op = revision["op"]
        return versions

    async def _retention_floor(self, latest: dict[str, Any]) -> int:
        """The oldest revision still kept: retention applies when reading, even before
        pruning catches up (pending revisions are pruned only once published)."""
        # The current version is not a kept version; a deleted one is.
        skip = self._retention if latest["op"] == UPSERT else self._retention - 1
        if skip < 0:
            return int(latest["rev"]) + 1
        with mongo_errors("reading version retention"):
            oldest = (
                await self._revisions.find(
                    {"space_id": latest["space_id"], "path": latest["path"], "op": UPSERT},
                    projection={"rev": 1},
                )
                .sort("rev", DESCENDING)
                .skip(skip)
                .limit(1)
                .to_list(length=1)
            )
        return int(oldest[0]["rev"]) if oldest else 0

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
                self._heads.find({"space_id": space_id, "deleted": False, "path": {"$gt": after}})
                .sort("path", ASCENDING)
                .limit(limit)
            )
            heads = await cursor.to_list(length=limit)
        return [
            StoredDocument(
                space=parse_space_id(h["space_id"]),
                path=h["path"],
                content=h["content"],
                sha256=h["sha256"],
                size_bytes=h["size_bytes"],
                word_count=h["word_count"],
                version=h["version"],
                document_id=h["document_id"],
                created_at=h["created_at"],
                updated_at=h["updated_at"],
                updated_by=h["updated_by"],
            )
            for h in heads
        ]

    async def space_usage(self, space_id: str) -> SpaceUsage:
        match = {"space_id": space_id, "deleted": False}
        with mongo_errors("summing usage"):
            count = await self._heads.count_documents(match)
            # One accumulator per $group: FerretDB v1 computes only the first.
            totals = await self._heads.aggregate(
                [{"$match": match}, {"$group": {"_id": None, "used": {"$sum": "$size_bytes"}}}]
            ).to_list(length=1)
        return SpaceUsage(used_bytes=int(totals[0]["used"]) if totals else 0, document_count=count)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        with mongo_errors("summing usage by space"):
            rows = await self._heads.aggregate(
                [
                    {"$match": {"tenant": aggregate_owner, "deleted": False}},
                    {"$group": {"_id": "$space_id", "used": {"$sum": "$size_bytes"}}},
                ]
            ).to_list(length=None)
        return {str(row["_id"]): int(row["used"]) for row in rows}

    # --- changes -----------------------------------------------------------------------------

    async def save(self, change: DocumentWrite) -> StoredDocument:
        latest = await self._latest(change.space.id, change.path)
        alive = latest is not None and latest["op"] == UPSERT
        if change.expected_version == 0 and alive:
            raise ConcurrentModification(f"{change.path!r} was created concurrently")
        if change.expected_version != 0 and (
            not alive or latest is None or latest["version"] != change.expected_version
        ):
            raise ConcurrentModification(f"{change.path!r} changed concurrently")
        created_at = latest["created_at"] if alive and latest is not None else change.at
        revision = {
            "space_id": change.space.id,
            "path": change.path,
            "rev": (latest["rev"] if latest else 0) + 1,
            "op": UPSERT,
            "tenant": aggregate_owner(change.space),
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
            "pending": True,
        }
        await self._commit(revision)
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
        latest = await self._latest(deletion.space.id, deletion.path)
        if (
            latest is None
            or latest["op"] != UPSERT
            or latest["version"] != (deletion.expected_version)
        ):
            raise ConcurrentModification(f"{deletion.path!r} changed concurrently")
        revision = {
            "space_id": deletion.space.id,
            "path": deletion.path,
            "rev": latest["rev"] + 1,
            "op": DELETE,
            "tenant": aggregate_owner(deletion.space),
            "document_id": deletion.document_id,
            "version": deletion.expected_version,
            "sha256": deletion.sha256,
            "size_bytes": deletion.size_bytes,
            "created_at": latest["created_at"],
            "at": deletion.at,
            "by": deletion.by,
            "event_id": deletion.event_id,
            "pending": True,
        }
        await self._commit(revision)

    async def _commit(self, revision: dict[str, Any]) -> None:
        with mongo_errors("writing a document"):
            try:
                await self._revisions.insert_one(revision)
            except DuplicateKeyError:
                raise ConcurrentModification(f"{revision['path']!r} changed concurrently") from None
            await self.apply_head(revision)
            await self._prune(revision["space_id"], revision["path"])

    async def apply_head(self, revision: dict[str, Any]) -> None:
        """Makes the path's head reflect `revision` unless a newer one is already there."""
        space: SpaceRef = parse_space_id(revision["space_id"])
        head: dict[str, Any] = {
            "space_id": revision["space_id"],
            "path": revision["path"],
            "rev": revision["rev"],
            "tenant": aggregate_owner(space),
            "deleted": revision["op"] == DELETE,
            "document_id": revision["document_id"],
            "version": revision["version"],
            "updated_at": revision["at"],
            "updated_by": revision["by"],
            "created_at": revision["created_at"],
            "content": revision.get("content", ""),
            "sha256": revision["sha256"],
            "size_bytes": 0 if revision["op"] == DELETE else revision["size_bytes"],
            "word_count": revision.get("word_count", 0),
        }
        key = head_id(revision["space_id"], revision["path"])
        with mongo_errors("updating a document head"):
            try:
                await self._heads.replace_one(
                    {"_id": key, "rev": {"$lt": revision["rev"]}}, head, upsert=True
                )
            except DuplicateKeyError:
                pass  # a newer head is already in place

    async def _prune(self, space_id: str, path: str) -> None:
        """Keeps the current revision and `retention` earlier versions (published ones)."""
        with mongo_errors("pruning versions"):
            oldest_kept = (
                await self._revisions.find(
                    {"space_id": space_id, "path": path, "op": UPSERT}, projection={"rev": 1}
                )
                .sort("rev", DESCENDING)
                .skip(self._retention + 1)
                .limit(1)
                .to_list(length=1)
            )
            if oldest_kept:
                await self._revisions.delete_many(
                    {
                        "space_id": space_id,
                        "path": path,
                        "pending": False,
                        "rev": {"$lte": oldest_kept[0]["rev"]},
                    }
                )


def _version(revision: dict[str, Any], *, with_content: bool, deleted: bool) -> DocumentVersion:
    at: datetime = revision["at"]
    return DocumentVersion(
        document_id=revision["document_id"],
        version=revision["version"],
        sha256=revision["sha256"],
        size_bytes=revision["size_bytes"],
        updated_at=at,
        updated_by=revision["by"],
        content=revision.get("content", "") if with_content else "",
        deleted=deleted,
        seq=revision["rev"],
    )
