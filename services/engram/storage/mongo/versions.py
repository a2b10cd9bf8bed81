"""Kept versions: read back through the retention window, and pruned past it."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING

from engram.backends.mongo import mongo_errors
from engram.domain.documents import DocumentVersion
from engram.storage.mongo.chains import PRUNE_PAGE, MongoChains
from engram.storage.mongo.records import DELETE, PURGE, UPSERT, revision_id


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


class MongoVersions:
    def __init__(self, chains: MongoChains) -> None:
        self._chains = chains

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
                    await self._chains.heads.find(query, projection={"path": 1, "rev": 1})
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
        stale = rev - self._chains.retention - 1
        if stale < 1:
            return 0
        window = {
            "$gte": revision_id(space_id, path, 1),
            "$lte": revision_id(space_id, path, stale),
        }
        with mongo_errors("pruning versions"):
            found = await self._chains.revisions.find(
                {"_id": window}, projection={"event_id": 1}
            ).to_list(length=None)
            if not found:
                return 0
            pending = await self._chains.pointers.pending_among([r["event_id"] for r in found])
            doomed = [r["_id"] for r in found if r["event_id"] not in pending]
            if not doomed:
                return 0
            result = await self._chains.revisions.delete_many({"_id": {"$in": doomed}})
        return int(result.deleted_count)

    async def _kept(
        self, space_id: str, path: str
    ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], bool]]]:
        """(newest revision, kept versions newest first with their `deleted` flag), walking
        the chain backwards by _id through the retention window."""
        chain = await self._chains.chain(space_id, path)
        if chain.latest is None:
            return None, []
        kept: list[tuple[dict[str, Any], bool]] = []
        if chain.latest["op"] == PURGE:
            return chain.latest, kept  # erased: nothing before it is readable
        newer_op = chain.latest["op"]
        rev = chain.rev - 1
        floor = chain.rev - self._chains.retention
        if chain.latest["op"] == DELETE:
            floor -= 1  # a deleted document's last version is a kept version
        while rev >= max(1, floor):
            revision = await self._chains.revision(space_id, path, rev)
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
