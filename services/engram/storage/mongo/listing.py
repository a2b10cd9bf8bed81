"""Listings over the document heads: a directory, a space's documents for export, every
live path, usage and the spaces of a tenant (secondary indexes, see HEAD_INDEXES)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pymongo import ASCENDING

from engram.backends.mongo import mongo_errors
from engram.domain.documents import PathEntry, SpaceSummary, SpaceUsage
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.storage.mongo.chains import MongoChains
from engram.storage.mongo.records import head_id


class MongoListings:
    def __init__(self, chains: MongoChains) -> None:
        self._chains = chains

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
                self._chains.heads.find(
                    {"space_id": space_id, "deleted": False, "path": bounds},
                    projection={"path": 1, "size_bytes": 1, "updated_at": 1},
                )
                .sort("path", ASCENDING)
                .limit(limit)
            )
            heads = await cursor.to_list(length=limit)
        return [PathEntry(h["path"], h["size_bytes"], h["updated_at"]) for h in heads]

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
                    await self._chains.heads.find(page, projection={"space_id": 1, "path": 1})
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
            count = await self._chains.heads.count_documents(match)
            # One accumulator per $group: FerretDB v1 computes only the first.
            totals = await (
                await self._chains.heads.aggregate(
                    [{"$match": match}, {"$group": {"_id": None, "used": {"$sum": "$size_bytes"}}}]
                )
            ).to_list(length=1)
        return SpaceUsage(used_bytes=int(totals[0]["used"]) if totals else 0, document_count=count)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        with mongo_errors("summing usage by space"):
            cursor = await self._chains.heads.aggregate(
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
                await self._chains.heads.aggregate(
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
                await self._chains.heads.aggregate(
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
                newest = await self._chains.heads.find_one(
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
            cursor = await self._chains.heads.aggregate(
                [
                    {"$match": {"deleted": False, "space_id": {"$gt": after}}},
                    {"$group": {"_id": "$space_id"}},
                    {"$sort": {"_id": 1}},
                    {"$limit": limit},
                ]
            )
            rows = await cursor.to_list(length=None)
        return [parse_space_id(str(row["_id"])) for row in rows]

    async def all_paths(self, *, after: tuple[str, str], limit: int) -> list[tuple[str, str]]:
        """(space_id, path) of every live document of every space after `after`, in that
        order (head ids sort so: a newline sorts below every character an id may hold)."""
        query: dict[str, Any] = {"deleted": False}
        if after != ("", ""):
            query["_id"] = {"$gt": head_id(*after)}
        with mongo_errors("listing every document"):
            heads = (
                await self._chains.heads.find(query, projection={"space_id": 1, "path": 1})
                .sort("_id", ASCENDING)
                .limit(limit)
                .to_list(length=limit)
            )
        return [(str(head["space_id"]), str(head["path"])) for head in heads]
