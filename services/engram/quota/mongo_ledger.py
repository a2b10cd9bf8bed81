"""MongoUsageLedger: usage counters as per-counter entry chains on MongoDB.

A counter's value is its newest entry; a charge inserts entry `seq + 1` under the _id
`<counter>\\n<seq>` carrying the new value, and only one writer can take an _id - the
conditional increment is built on the one write every MongoDB-protocol server here makes
atomic (FerretDB v1's `$inc` is not atomic under concurrency). Each step is checked
against the limit, so a counter never passes it, however many writers race.

`usage_counters` holds a head per counter (latest seq and value, and its owner); readers
probe `seq + 1` by _id to catch up with a lagging head: only _id lookups on the hot path.

A charge touching two counters takes the space step, then the aggregate step; if the
aggregate refuses, the space step is reversed by a compensating step. A crash between
the two leaves the space over-counted until `Reconcile` (never over its limit). Within
one process, charges on the same counters queue on local locks.

Round trips are overlapped where no order is needed: a charge records its idempotency key
while it reads its counters' heads (the reads are dropped if the key was already taken), and
a step updates the head while it deletes the entry leaving history. A charge's first try
steps from the head without probing `seq + 1` first: the probe's answer is only a snapshot,
and the insert of `seq + 1` fails all the same if another writer took it (then the counter
is read again, probes included; a refusal is only ever decided on a fully read counter).
Skipping it loses no safety: a probe cannot see an entry
that history pruning already removed either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.domain.errors import QuotaExceeded, WriteContention
from engram.domain.quotas import Counter, apply_delta, check_growth
from engram.quota.ports import ChargeOutcome
from engram.runtime.keyed_locks import KeyedLocks

MAX_ATTEMPTS = 200
# Entries this many steps behind the newest are history nobody reads: removed.
KEEP_STEPS = 16
KEY_RETENTION = timedelta(days=1)


def entry_id(counter: str, seq: int) -> str:
    return f"{counter}\n{seq:012d}"


class MongoUsageLedger:
    def __init__(self, database: MongoDatabase) -> None:
        self._entries = database["usage_entries"]
        self._heads = database["usage_counters"]
        self._keys = database["usage_keys"]
        self._overrides = database["quota_overrides"]
        self._locks = KeyedLocks()
        self._applies = 0

    async def ensure_indexes(self) -> None:
        await ensure_indexes(self._heads, [IndexModel([("owner", ASCENDING)], name="owner")])
        await ensure_indexes(self._keys, [IndexModel([("at", ASCENDING)], name="at")])

    async def _head(self, counter: str) -> tuple[int, int]:
        """(seq, value) of the counter's head: its newest entry or a little behind it."""
        with mongo_errors("reading a usage counter"):
            head = await self._heads.find_one({"_id": counter})
        return (int(head["seq"]), int(head["used"])) if head else (0, 0)

    async def _current(self, counter: str) -> tuple[int, int]:
        """(seq, value) of the counter's newest entry."""
        seq, used = await self._head(counter)
        with mongo_errors("reading a usage counter"):
            while True:
                entry = await self._entries.find_one({"_id": entry_id(counter, seq + 1)})
                if entry is None:
                    return seq, used
                seq, used = seq + 1, int(entry["used"])

    async def _take_step(
        self, owner: str, counter: str, seq: int, value: int, delta: int, **extra: Any
    ) -> bool:
        """Inserts entry `seq` with `value`; False when another writer took that step."""
        with mongo_errors("charging a usage counter"):
            try:
                await self._entries.insert_one(
                    {
                        "_id": entry_id(counter, seq),
                        "used": value,
                        "delta": delta,
                        "at": datetime.now(UTC),
                        **extra,
                    }
                )
            except DuplicateKeyError:
                return False
            await asyncio.gather(
                self._advance_head(owner, counter, seq, value), self._forget(counter, seq)
            )
        return True

    async def _advance_head(self, owner: str, counter: str, seq: int, value: int) -> None:
        try:
            await self._heads.replace_one(
                {"_id": counter, "seq": {"$lt": seq}},
                {"seq": seq, "used": value, "owner": owner},
                upsert=True,
            )
        except DuplicateKeyError:
            pass  # a newer head is in place

    async def _forget(self, counter: str, seq: int) -> None:
        """Deletes the entry that step `seq` pushed out of the kept history."""
        if seq > KEEP_STEPS:
            await self._entries.delete_one({"_id": entry_id(counter, seq - KEEP_STEPS)})

    async def _step(
        self,
        owner: str,
        counter: Counter,
        delta: int,
        *,
        check: bool,
        read: tuple[int, int] | None = None,
    ) -> int:
        """Moves one counter by `delta` (checked against its limit when growing); `read` is
        the counter's head (seq, value) if it was just read, for the first attempt."""
        for _ in range(MAX_ATTEMPTS):
            from_head = read is not None
            if read is None:
                seq, used = await self._current(counter.key)
            else:
                (seq, used), read = read, None
            if check:
                try:
                    check_growth(counter, used, delta)
                except QuotaExceeded:
                    if from_head:
                        continue  # refuse only on the newest entry, not a lagging head
                    raise
            value = apply_delta(used, delta)
            if await self._take_step(owner, counter.key, seq + 1, value, delta):
                return value
        raise WriteContention(
            f"usage counter {counter.key} kept changing under {MAX_ATTEMPTS} tries; retry"
        )

    async def apply(
        self, owner: str, counters: Sequence[Counter], delta: int, idempotency_key: str
    ) -> ChargeOutcome:
        async with self._locks.hold_all(counter.key for counter in counters):
            recorded, reads = await self._record_and_read(idempotency_key, counters)
            if not recorded:
                return ChargeOutcome(
                    applied=False, values=await self.read([c.key for c in counters])
                )
            values: dict[str, int] = {}
            completed = False
            try:
                for counter, read in zip(counters, reads, strict=True):
                    values[counter.key] = await self._step(
                        owner, counter, delta, check=delta > 0, read=read
                    )
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

    async def _record_and_read(
        self, idempotency_key: str, counters: Sequence[Counter]
    ) -> tuple[bool, list[tuple[int, int]]]:
        """Takes the charge's key while reading its counters. If a read fails after the key
        was taken, the key is freed again, so a retry of the charge can apply."""
        key_taken, reads = await asyncio.gather(
            self._record_key(idempotency_key),
            asyncio.gather(*(self._head(c.key) for c in counters)),
            return_exceptions=True,
        )
        if isinstance(key_taken, BaseException):
            raise key_taken
        if isinstance(reads, BaseException):
            if key_taken:
                with mongo_errors("releasing a charge key"):
                    await self._keys.delete_one({"_id": idempotency_key})
            raise reads
        return key_taken, reads

    async def _record_key(self, idempotency_key: str) -> bool:
        """Takes the charge's key; False when a charge with that key was already recorded."""
        with mongo_errors("recording a charge"):
            try:
                await self._keys.insert_one({"_id": idempotency_key, "at": datetime.now(UTC)})
            except DuplicateKeyError:
                return False
        return True

    async def _prune_keys(self) -> None:
        self._applies += 1
        if self._applies % 1000 == 0:
            with mongo_errors("pruning charge keys"):
                await self._keys.delete_many({"at": {"$lt": datetime.now(UTC) - KEY_RETENTION}})

    async def read(self, keys: Sequence[str]) -> dict[str, int]:
        return {key: (await self._current(key))[1] for key in keys}

    async def counters_of(self, owner: str) -> dict[str, int]:
        with mongo_errors("listing usage counters"):
            heads = await self._heads.find({"owner": owner}, projection={"_id": 1}).to_list(
                length=None
            )
        return await self.read([str(head["_id"]) for head in heads])

    async def overwrite(self, owner: str, values: Mapping[str, int]) -> None:
        async with self._locks.hold_all(values):
            for key, value in values.items():
                for _ in range(MAX_ATTEMPTS):
                    seq, used = await self._current(key)
                    if await self._take_step(
                        owner, key, seq + 1, value, value - used, reconciled=True
                    ):
                        break
                else:
                    raise WriteContention(f"usage counter {key} kept changing; retry reconcile")

    async def get_override(self, owner: str) -> int | None:
        with mongo_errors("reading a quota override"):
            row = await self._overrides.find_one({"_id": owner})
        return int(row["quota_bytes"]) if row else None

    async def set_override(self, owner: str, quota_bytes: int) -> None:
        with mongo_errors("setting a quota override"):
            await self._overrides.replace_one(
                {"_id": owner},
                {"quota_bytes": quota_bytes, "at": datetime.now(UTC)},
                upsert=True,
            )
