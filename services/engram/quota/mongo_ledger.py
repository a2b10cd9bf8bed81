"""MongoUsageLedger: usage counters as per-counter entry chains on MongoDB.

A counter's value is its newest entry in `usage_entries`; a charge inserts entry `seq + 1`
carrying the new value, and the unique index (counter, seq) lets exactly one writer take
each step - conditional increments built on the one write every MongoDB-protocol server
here makes atomic (FerretDB v1's `$inc` is not atomic under concurrency). Every step is
checked against the limit, so a counter can never pass it, however many writers race.

A charge touching two counters inserts the space step, then the aggregate step; if the
aggregate refuses or loses a race, the space step is reversed by a compensating step. A
crash between the two leaves the space over-counted until `Reconcile` (never under its
limit). Within one process, charges on the same counters queue on local locks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, mongo_errors
from engram.domain.errors import WriteContention
from engram.domain.quotas import Counter, apply_delta, check_growth
from engram.quota.ports import ChargeOutcome
from engram.runtime.keyed_locks import KeyedLocks

MAX_ATTEMPTS = 200
# Entries older than the newest this many steps are history nobody reads: pruned.
KEEP_STEPS = 16
KEY_RETENTION = timedelta(days=1)


class MongoUsageLedger:
    def __init__(self, database: MongoDatabase) -> None:
        self._entries = database["usage_entries"]
        self._keys = database["usage_keys"]
        self._overrides = database["quota_overrides"]
        self._locks = KeyedLocks()
        self._applies = 0

    async def ensure_indexes(self) -> None:
        with mongo_errors("creating quota indexes"):
            await self._entries.create_indexes(
                [
                    IndexModel(
                        [("counter", ASCENDING), ("seq", ASCENDING)],
                        unique=True,
                        name="counter_seq",
                    ),
                    IndexModel([("owner", ASCENDING), ("counter", ASCENDING)], name="owner"),
                ]
            )
            await self._keys.create_indexes([IndexModel([("at", ASCENDING)], name="at")])

    async def _latest(self, counter: str) -> dict[str, Any] | None:
        with mongo_errors("reading a usage counter"):
            entry: dict[str, Any] | None = await self._entries.find_one(
                {"counter": counter}, sort=[("seq", DESCENDING)]
            )
        return entry

    async def _step(self, owner: str, counter: Counter, delta: int, *, check: bool) -> int:
        """Moves one counter by `delta` (checked against its limit when growing)."""
        for _ in range(MAX_ATTEMPTS):
            latest = await self._latest(counter.key)
            used = int(latest["used"]) if latest else 0
            if check:
                check_growth(counter, used, delta)
            value = apply_delta(used, delta)
            seq = (int(latest["seq"]) if latest else 0) + 1
            try:
                with mongo_errors("charging a usage counter"):
                    await self._entries.insert_one(
                        {
                            "counter": counter.key,
                            "seq": seq,
                            "owner": owner,
                            "used": value,
                            "delta": delta,
                            "at": datetime.now(UTC),
                        }
                    )
            except DuplicateKeyError:
                continue  # another process took this step; read again
            if seq % KEEP_STEPS == 0:
                with mongo_errors("pruning a usage counter"):
                    await self._entries.delete_many(
                        {"counter": counter.key, "seq": {"$lte": seq - KEEP_STEPS}}
                    )
            return value
        raise WriteContention(
            f"usage counter {counter.key} kept changing under {MAX_ATTEMPTS} tries; retry"
        )

    async def apply(
        self, owner: str, counters: Sequence[Counter], delta: int, idempotency_key: str
    ) -> ChargeOutcome:
        async with self._locks.hold_all(counter.key for counter in counters):
            with mongo_errors("recording a charge"):
                try:
                    await self._keys.insert_one({"_id": idempotency_key, "at": datetime.now(UTC)})
                except DuplicateKeyError:
                    return ChargeOutcome(
                        applied=False, values=await self.read([c.key for c in counters])
                    )
            values: dict[str, int] = {}
            completed = False
            try:
                for counter in counters:
                    values[counter.key] = await self._step(owner, counter, delta, check=delta > 0)
                completed = True
            finally:
                if not completed:
                    # Reverse the steps already taken (shrinking is never refused) and free
                    # the key, so a retry of this charge can apply.
                    for counter in counters:
                        if counter.key in values:
                            await self._step(owner, counter, -delta, check=False)
                    with mongo_errors("releasing a charge key"):
                        await self._keys.delete_one({"_id": idempotency_key})
        await self._prune_keys()
        return ChargeOutcome(applied=True, values=values)

    async def _prune_keys(self) -> None:
        self._applies += 1
        if self._applies % 1000 == 0:
            with mongo_errors("pruning charge keys"):
                await self._keys.delete_many({"at": {"$lt": datetime.now(UTC) - KEY_RETENTION}})

    async def read(self, keys: Sequence[str]) -> dict[str, int]:
        values: dict[str, int] = {}
        for key in keys:
            latest = await self._latest(key)
            values[key] = int(latest["used"]) if latest else 0
        return values

    async def counters_of(self, owner: str) -> dict[str, int]:
        with mongo_errors("listing usage counters"):
            names = await self._entries.distinct("counter", {"owner": owner})
        return await self.read([str(name) for name in names])

    async def overwrite(self, owner: str, values: Mapping[str, int]) -> None:
        async with self._locks.hold_all(values):
            for key, value in values.items():
                for _ in range(MAX_ATTEMPTS):
                    latest = await self._latest(key)
                    seq = (int(latest["seq"]) if latest else 0) + 1
                    try:
                        with mongo_errors("correcting a usage counter"):
                            await self._entries.insert_one(
                                {
                                    "counter": key,
                                    "seq": seq,
                                    "owner": owner,
                                    "used": value,
                                    "delta": value - (int(latest["used"]) if latest else 0),
                                    "at": datetime.now(UTC),
                                    "reconciled": True,
                                }
                            )
                    except DuplicateKeyError:
                        continue
                    break

    async def get_override(self, owner: str) -> int | None:
        with mongo_errors("reading a quota override"):
            row = await self._overrides.find_one({"_id": owner})
        return int(row["quota_bytes"]) if row else None

    async def set_override(self, owner: str, quota_bytes: int) -> None:
        with mongo_errors("setting a quota override"):
            await self._overrides.replace_one(
                {"_id": owner}, {"quota_bytes": quota_bytes, "at": time.time()}, upsert=True
            )
