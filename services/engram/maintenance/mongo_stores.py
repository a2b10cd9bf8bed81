"""The worker's stores on MongoDB (and FerretDB, whose updates are not atomic under
concurrency: only inserts into a unique `_id` are).

A lease is a history of generations: taking, renewing or releasing it inserts generation
n+1 with the unique `_id` `<key>#<n+1>`, after reading generation n and checking that it
allows the change (released, expired, or one's own). However many workers race, one insert
wins each generation; the others get DuplicateKeyError and know the lease moved. Old
generations are pruned; a racer so slow that it inserts a pruned number finds a newer
generation above its own when it checks, and gives it up.

Run records and settings are written by one writer at a time (the holder of the run's
lease; an admin's SetSpaceMaintenance replaces the whole document), so plain writes do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo import DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.sqlite import from_micros, to_micros
from engram.domain.maintenance import JobOutcome, JobRun, SpaceSettings
from engram.domain.maintenance_rules import LastRuns
from engram.maintenance.ports import Lease, utc_now
from engram.maintenance.records import (
    run_from_dict,
    run_to_dict,
    settings_from_dict,
    settings_to_dict,
)

# Generations kept per lease key below the newest (the history a slow racer is checked on).
KEPT_GENERATIONS = 8


class MongoLeaseStore:
    def __init__(
        self,
        database: MongoDatabase,
        *,
        collection: str = "maintenance_leases",
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._collection = database[collection]
        self._clock = clock

    async def ensure_indexes(self) -> None:
        await ensure_indexes(
            self._collection,
            [IndexModel([("key", 1), ("gen", DESCENDING)], name="key_gen")],
        )

    async def _latest(self, key: str) -> dict[str, Any] | None:
        return await self._collection.find_one({"key": key}, sort=[("gen", DESCENDING)])

    async def _insert(
        self, key: str, generation: int, holder: str, expires: datetime, *, released: bool
    ) -> bool:
        """Inserts generation `generation`; False when another writer took that number, or
        when a newer generation exists (this writer read a pruned history)."""
        document_id = f"{key}#{generation}"
        try:
            await self._collection.insert_one(
                {
                    "_id": document_id,
                    "key": key,
                    "gen": generation,
                    "holder": holder,
                    "expires_at": expires,
                    "released": released,
                }
            )
        except DuplicateKeyError:
            return False
        latest = await self._latest(key)
        if latest is not None and int(latest["gen"]) > generation:
            await self._collection.delete_one({"_id": document_id})
            return False
        if generation > KEPT_GENERATIONS:
            await self._collection.delete_many(
                {"key": key, "gen": {"$lt": generation - KEPT_GENERATIONS}}
            )
        return True

    @staticmethod
    def _live(document: dict[str, Any] | None, now: datetime) -> bool:
        return (
            document is not None
            and not document.get("released", False)
            and document["expires_at"] > now
        )

    async def acquire(self, key: str, holder: str, ttl: timedelta) -> Lease | None:
        now = self._clock()
        with mongo_errors("taking a maintenance lease"):
            latest = await self._latest(key)
            if self._live(latest, now) and latest is not None and latest["holder"] != holder:
                return None
            generation = 0 if latest is None else int(latest["gen"]) + 1
            expires = now + ttl
            if not await self._insert(key, generation, holder, expires, released=False):
                return None
        return Lease(key, holder, expires, generation)

    async def renew(self, lease: Lease, ttl: timedelta) -> Lease | None:
        expires = self._clock() + ttl
        with mongo_errors("renewing a maintenance lease"):
            latest = await self._latest(lease.key)
            if latest is None or int(latest["gen"]) != lease.generation:
                return None
            if not await self._insert(
                lease.key, lease.generation + 1, lease.holder, expires, released=False
            ):
                return None
        return Lease(lease.key, lease.holder, expires, lease.generation + 1)

    async def release(self, lease: Lease) -> None:
        with mongo_errors("releasing a maintenance lease"):
            latest = await self._latest(lease.key)
            if latest is None or int(latest["gen"]) != lease.generation:
                return
            await self._insert(
                lease.key, lease.generation + 1, lease.holder, self._clock(), released=True
            )

    async def current(self, key: str) -> Lease | None:
        with mongo_errors("reading a maintenance lease"):
            latest = await self._latest(key)
        if latest is None or not self._live(latest, self._clock()):
            return None
        return Lease(key, str(latest["holder"]), latest["expires_at"], int(latest["gen"]))


class MongoJobRunStore:
    def __init__(
        self,
        database: MongoDatabase,
        *,
        runs: str = "maintenance_runs",
        last: str = "maintenance_last",
    ) -> None:
        self._runs = database[runs]
        self._last = database[last]

    async def ensure_indexes(self) -> None:
        await ensure_indexes(
            self._runs,
            [
                IndexModel([("started_us", DESCENDING), ("run_id", DESCENDING)], name="newest"),
                IndexModel(
                    [("space_id", 1), ("started_us", DESCENDING), ("run_id", DESCENDING)],
                    name="space_newest",
                ),
                IndexModel([("job", 1), ("space_id", 1), ("outcome", 1)], name="job_space"),
            ],
        )
        await ensure_indexes(self._last, [IndexModel([("space_id", 1)], name="space")])

    async def start(self, run: JobRun) -> None:
        with mongo_errors("recording a job run"):
            await self._runs.insert_one({"_id": run.run_id, **run_to_dict(run)})

    async def finish(self, run: JobRun) -> None:
        finished = run.finished_at or utc_now()
        field = "succeeded_us" if run.outcome is JobOutcome.SUCCEEDED else "failed_us"
        last_id = f"{run.job}|{run.space.id}"
        with mongo_errors("recording the end of a job run"):
            await self._runs.replace_one(
                {"_id": run.run_id}, {"_id": run.run_id, **run_to_dict(run)}, upsert=True
            )
            # Only the lease holder finishes a run of this job on this space: no racer.
            previous = await self._last.find_one({"_id": last_id})
            if previous is not None and int(previous.get(field) or 0) >= to_micros(finished):
                return
            await self._last.update_one(
                {"_id": last_id},
                {
                    "$set": {
                        "job": run.job,
                        "space_id": run.space.id,
                        field: to_micros(finished),
                    }
                },
                upsert=True,
            )

    async def abandon(self, job: str, space_id: str, at: datetime, message: str) -> int:
        with mongo_errors("closing abandoned job runs"):
            result = await self._runs.update_many(
                {"job": job, "space_id": space_id, "outcome": JobOutcome.RUNNING.value},
                {
                    "$set": {
                        "outcome": JobOutcome.FAILED.value,
                        "finished_us": to_micros(at),
                        "message": message,
                    }
                },
            )
        return int(result.modified_count)

    async def page(
        self,
        *,
        space_id: str | None,
        job: str | None,
        before: tuple[int, str] | None,
        limit: int,
    ) -> list[JobRun]:
        query: dict[str, Any] = {}
        if space_id is not None:
            query["space_id"] = space_id
        if job:
            query["job"] = job
        if before is not None:
            started, run_id = before
            query["$or"] = [
                {"started_us": {"$lt": started}},
                {"started_us": started, "run_id": {"$lt": run_id}},
            ]
        with mongo_errors("listing job runs"):
            cursor = self._runs.find(
                query, sort=[("started_us", DESCENDING), ("run_id", DESCENDING)], limit=limit
            )
            rows = await cursor.to_list(length=limit)
        return [run_from_dict(row) for row in rows]

    async def last_runs(self, space_ids: Sequence[str]) -> dict[tuple[str, str], LastRuns]:
        if not space_ids:
            return {}
        with mongo_errors("reading when jobs last ran"):
            rows = await self._last.find({"space_id": {"$in": list(space_ids)}}).to_list(
                length=None
            )
        return {
            (str(row["job"]), str(row["space_id"])): LastRuns(
                None if row.get("succeeded_us") is None else from_micros(row["succeeded_us"]),
                None if row.get("failed_us") is None else from_micros(row["failed_us"]),
            )
            for row in rows
        }

    async def prune(self, older_than: datetime, limit: int) -> int:
        with mongo_errors("pruning old job runs"):
            cursor = self._runs.find(
                {
                    "started_us": {"$lt": to_micros(older_than)},
                    "outcome": {"$ne": JobOutcome.RUNNING.value},
                },
                projection={"_id": 1},
                limit=limit,
            )
            ids = [row["_id"] for row in await cursor.to_list(length=limit)]
            if not ids:
                return 0
            result = await self._runs.delete_many({"_id": {"$in": ids}})
        return int(result.deleted_count)


class MongoSpaceSettingsStore:
    def __init__(self, database: MongoDatabase, collection: str = "space_maintenance") -> None:
        self._collection = database[collection]

    async def get_many(self, space_ids: Sequence[str]) -> dict[str, SpaceSettings]:
        if not space_ids:
            return {}
        with mongo_errors("reading maintenance settings"):
            rows = await self._collection.find({"_id": {"$in": list(space_ids)}}).to_list(
                length=None
            )
        return {str(row["_id"]): settings_from_dict(row) for row in rows}

    async def put(self, space_id: str, settings: SpaceSettings) -> None:
        document = {"_id": space_id, **settings_to_dict(settings)}
        with mongo_errors("saving maintenance settings"):
            try:
                await self._collection.replace_one({"_id": space_id}, document, upsert=True)
            except DuplicateKeyError:
                # Two first saves raced (FerretDB upserts insert twice): the other's insert
                # exists now, so this save replaces it.
                await self._collection.replace_one({"_id": space_id}, document)
