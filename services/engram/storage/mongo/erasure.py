"""Erasure: a path (PURGE) or a whole space (SPACE_DELETE) committed as a tombstone revision,
then everything before it deleted, finished by the relay after a crash."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING

from engram.backends.mongo import mongo_errors
from engram.domain.documents import Erasure, ErasureResult
from engram.domain.spaces import parse_space_id
from engram.storage.mongo.chains import MongoChains
from engram.storage.mongo.records import (
    PURGE,
    SPACE_DELETE,
    UPSERT,
    head_id,
    revision_id,
    trace_field,
)
from engram.storage.ports import ConcurrentModification

# A tombstone insert lost to concurrent writes this many times in a row gives up (retry).
_TOMBSTONE_ATTEMPTS = 20

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


class MongoErasures:
    def __init__(self, chains: MongoChains) -> None:
        self._chains = chains

    async def erase(self, erasure: Erasure) -> ErasureResult:
        if erasure.whole_space:
            return await self._erase_space(erasure)
        return await self._purge(erasure)

    async def _purge(self, erasure: Erasure) -> ErasureResult:
        space_id, path = erasure.space.id, erasure.path
        chain = await self._chains.chain(space_id, path)
        latest = chain.latest
        if latest is None or latest["op"] == PURGE:
            # Nothing stored, or purged already: finish what a crash may have left.
            leftovers = await self._erase_below(space_id, path, chain.rev)
            return _erased(leftovers, live=None)
        live = latest if chain.alive else None
        await self._chains.commit(self._tombstone(erasure, chain.rev + 1, latest, erasure.event_id))
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
            **trace_field(erasure.trace_context),
        }

    async def _erase_below(self, space_id: str, path: str, rev: int) -> list[dict[str, Any]]:
        """Deletes every revision of the path before `rev`, and their unpublished event
        pointers (an erased change is never announced); returns what was deleted."""
        query = {
            "_id": {"$gt": revision_id(space_id, path, 0), "$lt": revision_id(space_id, path, rev)}
        }
        with mongo_errors("erasing versions"):
            found = await self._chains.revisions.find(
                query, projection={"op": 1, "event_id": 1, "size_bytes": 1}
            ).to_list(length=None)
            if found:
                await self._chains.pointers.drop_many(
                    [r["event_id"] for r in found if r.get("event_id")]
                )
                await self._chains.revisions.delete_many(
                    {"_id": {"$in": [r["_id"] for r in found]}}
                )
        return found

    async def _erase_space(self, erasure: Erasure) -> ErasureResult:
        space_id = erasure.space.id
        with mongo_errors("reading a space"):
            standing = await self._chains.heads.find_one(
                {"space_id": space_id, "path": {"$ne": ""}, "op": {"$ne": PURGE}},
                projection={"_id": 1},
            )
        if standing is None:
            # Nothing stored, or erased already: finish what a crash may have left.
            marker = (await self._chains.chain(space_id, "")).latest
            if marker is None:
                return ErasureResult()
            return await self._erase_paths(erasure.space.id, marker)
        for _ in range(_TOMBSTONE_ATTEMPTS):
            chain = await self._chains.chain(space_id, "")
            marker = self._tombstone(erasure, chain.rev + 1, None, erasure.event_id)
            try:
                await self._chains.commit(marker)
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
                    await self._chains.heads.find(
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
            chain = await self._chains.chain(space_id, path)
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
                await self._chains.commit(tombstone, announce=False)
            except ConcurrentModification:
                continue
            erased = await self._erase_below(space_id, path, chain.rev + 1)
            return _erased(erased, live=latest if chain.alive else None)
        raise ConcurrentModification(f"{path!r} kept changing while its space was deleted")
