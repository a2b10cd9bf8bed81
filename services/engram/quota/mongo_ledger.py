"""MongoUsageLedger: usage counters as per-counter entry chains on MongoDB.

A counter's value is its newest entry; a charge inserts entry `seq + 1` under the _id
`<counter>\\n<seq>` carrying the new value, and only one writer can take an _id - the
conditional increment is built on the one write every MongoDB-protocol server here makes
atomic (FerretDB v1's `$inc` is not atomic under concurrency). Each step is checked
against the limit, so a counter never passes it, however many writers race.

`usage_counters` holds a head per counter (a recent seq and value, and its owner), written
on the counter's first step and then every HEAD_EVERY steps; readers probe `seq + 1` by
_id from it to the newest entry: only _id lookups on the hot path. Entries are grouped in
buckets of BUCKET consecutive steps (an indexed `bucket` field, an equality FerretDB v1
pushes down) and a step that completes a bucket deletes the bucket KEEP_STEPS steps back in
one command, so at least KEEP_STEPS - BUCKET entries stay behind the newest: more than a
head can lag by.

A charge touching two counters takes the space step and the aggregate step (at once when
the heads just read admit both, else one after the other); if one refuses, the other is
reversed by a compensating step. A crash in between leaves a counter over-counted until
`Reconcile` (never over its limit).

Within one process, charges on the same counters queue on local locks, and the queue is
committed as a group: whoever gets the locks applies every charge waiting for the same
counters as one step per counter (their sum; if the sum would pass a limit, one at a time,
so exactly the charges that fit apply). Each charge's idempotency key is recorded while its
group reads the counters' heads; a shrinking group waits for the keys and drops a charge
whose key was taken already, a growing group steps without waiting for them and then
reverses such a replay (a growth reversed is a shrink, which is never refused), so a keyed
remote charge costs what an in-process one does plus a key insert beside it. A group
steps from the newer of the head it just read and the newest entry this process wrote or
read itself (the head lags by up to HEAD_EVERY steps; the process's own
entry is newest as long as no other process charged the counter): the insert of `seq + 1`
decides either way, and fails if another writer took it (then the counter is read again,
probes included; a refusal is only ever decided on a fully read counter). Starting from a
value at least as new as a head read a moment ago is safe: history pruning never reaches
within KEEP_STEPS - BUCKET steps of the newest entry, further than any head lags.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.mongo_batch import GroupedWrites
from engram.domain.errors import EngramError, QuotaExceeded, WriteContention
from engram.domain.quotas import Counter, apply_delta, check_growth
from engram.quota.ports import ChargeOutcome
from engram.runtime.keyed_locks import KeyedLocks

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 200
# The head is written on a counter's first step and on every HEAD_EVERY-th.
HEAD_EVERY = 8
# Entries are deleted a bucket (BUCKET consecutive steps) at a time ...
BUCKET = 8
# ... once they are KEEP_STEPS steps behind the newest: at least KEEP_STEPS - BUCKET stay.
KEEP_STEPS = 32
KEY_RETENTION = timedelta(days=1)


def entry_id(counter: str, seq: int) -> str:
    return f"{counter}\n{seq:012d}"


def bucket_id(counter: str, seq: int) -> str:
    return f"{counter}\n{seq // BUCKET}"


@dataclass(eq=False, slots=True)
class _Charge:
    """One charge waiting for its group: its delta, its key being recorded, its result."""

    delta: int
    key_recorded: asyncio.Future[bool]
    # The counter values after its step; None when its key was recorded already (a replay).
    result: asyncio.Future[dict[str, int] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class MongoUsageLedger:
    def __init__(self, database: MongoDatabase) -> None:
        self._entries = database["usage_entries"]
        self._heads = database["usage_counters"]
        self._keys = database["usage_keys"]
        self._overrides = database["quota_overrides"]
        self._org_members = database["org_members"]
        self._locks = KeyedLocks()
        # Concurrent charges share commands (see backends/mongo_batch.py).
        self._entry_inserts = GroupedWrites(self._entries)
        self._key_inserts = GroupedWrites(self._keys)
        self._applies = 0
        # counter -> (seq, value) of the newest entry this process wrote or read.
        self._known: dict[str, tuple[int, int]] = {}
        # (owner, counters, growing) -> charges waiting to be committed as a group.
        self._waiting: dict[tuple[str, tuple[str, ...], bool], list[_Charge]] = {}

    async def ensure_indexes(self) -> None:
        await ensure_indexes(self._heads, [IndexModel([("owner", ASCENDING)], name="owner")])
        await ensure_indexes(self._keys, [IndexModel([("at", ASCENDING)], name="at")])
        await ensure_indexes(self._entries, [IndexModel([("bucket", ASCENDING)], name="bucket")])
        await ensure_indexes(self._org_members, [IndexModel([("org", ASCENDING)], name="org")])

    def _learn(self, counter: str, seq: int, value: int) -> None:
        known = self._known.get(counter)
        if known is None or known[0] < seq:
            self._known[counter] = (seq, value)

    def _newer_than_head(self, counter: str, head: tuple[int, int]) -> tuple[int, int]:
        """The newer of a just-read head and this process's own newest entry."""
        known = self._known.get(counter)
        return known if known is not None and known[0] >= head[0] else head

    async def _head(self, counter: str) -> tuple[int, int]:
        """(seq, value) of the counter's head: its newest entry or a little behind it."""
        with mongo_errors("reading a usage counter"):
            head = await self._heads.find_one({"_id": counter})
        return (int(head["seq"]), int(head["used"])) if head else (0, 0)

    async def _current(self, counter: str) -> tuple[int, int]:
        """(seq, value) of the counter's newest entry."""
        seq, used = self._newer_than_head(counter, await self._head(counter))
        with mongo_errors("reading a usage counter"):
            while True:
                entry = await self._entries.find_one({"_id": entry_id(counter, seq + 1)})
                if entry is None:
                    self._learn(counter, seq, used)
                    return seq, used
                seq, used = seq + 1, int(entry["used"])

    async def _take_step(
        self,
        owner: str,
        counter: str,
        seq: int,
        value: int,
        delta: int,
        *,
        reconciled: bool = False,
    ) -> bool:
        """Inserts entry `seq` with `value`; False when another writer took that step."""
        entry: dict[str, Any] = {
            "_id": entry_id(counter, seq),
            "used": value,
            "delta": delta,
            "at": datetime.now(UTC),
            "bucket": bucket_id(counter, seq),
        }
        if reconciled:
            entry["reconciled"] = True
        with mongo_errors("charging a usage counter"):
            try:
                await self._entry_inserts.insert(entry)
            except DuplicateKeyError:
                return False
            self._learn(counter, seq, value)
            chores = []
            if seq == 1 or seq % HEAD_EVERY == 0 or reconciled:
                chores.append(self._advance_head(owner, counter, seq, value))
            if seq % BUCKET == 0 and seq >= KEEP_STEPS:
                chores.append(self._forget(counter, seq - KEEP_STEPS))
            await asyncio.gather(*chores)
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
        """Deletes the bucket of entries holding step `seq` (history nobody reads)."""
        await self._entries.delete_many({"bucket": bucket_id(counter, seq)})

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
        where the counter stood a moment ago (seq, value), for the first attempt."""
        for _ in range(MAX_ATTEMPTS):
            from_snapshot = read is not None
            if read is None:
                seq, used = await self._current(counter.key)
            else:
                (seq, used), read = read, None
            if check:
                try:
                    check_growth(counter, used, delta)
                except QuotaExceeded:
                    if from_snapshot:
                        continue  # refuse only on the newest entry, not a lagging head
                    raise
            value = apply_delta(used, delta)
            if await self._take_step(owner, counter.key, seq + 1, value, delta):
                return value
        raise WriteContention(
            f"usage counter {counter.key} kept changing under {MAX_ATTEMPTS} tries; retry"
        )

    async def _step_all(
        self,
        owner: str,
        counters: Sequence[Counter],
        delta: int,
        reads: Sequence[tuple[int, int] | None],
    ) -> dict[str, int]:
        """Steps every counter by `delta` in order; if one refuses or fails, reverses the
        steps already taken (shrinking is never refused) before raising. When every counter
        has a snapshot that admits the step, the steps are taken at once (one round trip)."""
        if all(read is not None for read in reads) and self._admits(counters, delta, reads):
            return await self._step_together(owner, counters, delta, reads)
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
                for counter in counters:
                    if counter.key in values:
                        await self._step(owner, counter, -delta, check=False)
        return values

    @staticmethod
    def _admits(
        counters: Sequence[Counter], delta: int, reads: Sequence[tuple[int, int] | None]
    ) -> bool:
        for counter, read in zip(counters, reads, strict=True):
            if read is None:
                return False
            try:
                check_growth(counter, read[1], delta)
            except QuotaExceeded:
                return False
        return True

    async def _step_together(
        self,
        owner: str,
        counters: Sequence[Counter],
        delta: int,
        reads: Sequence[tuple[int, int] | None],
    ) -> dict[str, int]:
        """`_step_all` with every counter's step taken concurrently; if any refuses (after
        a lost race re-read it) or fails, the steps that were taken are reversed and the
        first counter's error (in order) is raised."""
        steps = [
            asyncio.ensure_future(self._step(owner, counter, delta, check=delta > 0, read=read))
            for counter, read in zip(counters, reads, strict=True)
        ]
        try:
            await asyncio.wait(steps)
        except asyncio.CancelledError:
            # Let the steps land, then reverse those taken: nothing stays half-done.
            await asyncio.wait(steps)
            await self._reverse(owner, counters, delta, steps)
            raise
        for step in steps:
            error = step.exception()
            if error is not None:
                await self._reverse(owner, counters, delta, steps)
                raise error
        return {counter.key: step.result() for counter, step in zip(counters, steps, strict=True)}

    async def _reverse(
        self,
        owner: str,
        counters: Sequence[Counter],
        delta: int,
        steps: Sequence[asyncio.Future[int]],
    ) -> None:
        for counter, step in zip(counters, steps, strict=True):
            if step.exception() is None:
                await self._step(owner, counter, -delta, check=False)

    async def apply(
        self, owner: str, counters: Sequence[Counter], delta: int, idempotency_key: str | None
    ) -> ChargeOutcome:
        charge = _Charge(delta, self._key_taken(idempotency_key))
        group = (owner, tuple(counter.key for counter in counters), delta > 0)
        waiting = self._waiting.setdefault(group, [])
        waiting.append(charge)
        try:
            async with self._locks.hold_all(group[1]):
                if not charge.result.done():
                    # Nobody committed this charge yet: commit it with every charge waiting.
                    taken = list(waiting)
                    waiting.clear()
                    await self._commit_group(owner, counters, taken)
        except BaseException:
            if charge in waiting:
                # Cancelled before its group was taken: it never applies; free its key.
                waiting.remove(charge)
                await self._release_key(charge, idempotency_key)
            elif charge.result.done() and charge.result.exception() is not None:
                # It led a group that failed half-way: the group's steps were reversed.
                await self._release_key(charge, idempotency_key)
            raise
        finally:
            if not waiting and self._waiting.get(group) is waiting:
                del self._waiting[group]
        try:
            values = charge.result.result()
        except EngramError:
            await self._release_key(charge, idempotency_key)
            raise
        if values is None:  # a replay: the key was recorded by an earlier charge
            return ChargeOutcome(applied=False, values=await self.read([c.key for c in counters]))
        await self._prune_keys()
        return ChargeOutcome(applied=True, values=values)

    def _key_taken(self, idempotency_key: str | None) -> asyncio.Future[bool]:
        """Whether the charge's key was free, as it is being recorded; a charge without a
        key (one that is never replayed) records nothing."""
        if idempotency_key is not None:
            return asyncio.ensure_future(self._record_key(idempotency_key))
        free: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        free.set_result(True)
        return free

    async def _release_key(self, charge: _Charge, idempotency_key: str | None) -> None:
        """Frees a charge's key if it recorded it, so a retry of the charge can apply."""
        if idempotency_key is None:
            return
        recorded = charge.key_recorded
        # Not cancelled: an insert already sent may land all the same. Its outcome decides.
        await asyncio.wait({recorded})
        if recorded.cancelled() or recorded.exception() is not None or not recorded.result():
            return
        with mongo_errors("releasing a charge key"):
            await self._keys.delete_one({"_id": idempotency_key})

    async def _commit_group(
        self, owner: str, counters: Sequence[Counter], charges: list[_Charge]
    ) -> None:
        """Applies `charges` (same counters, same sign) and settles each one's result:
        None for a charge whose key was recorded already (a replay, not applied), else the
        counter values after its step, or the error that refused it. A group interrupted
        half-way (its leader cancelled) reverses its steps and fails what it had not
        settled with WriteContention, so those charges can be retried."""
        try:
            await self._commit_taken(owner, counters, charges)
        finally:
            for charge in charges:
                if not charge.result.done():
                    charge.result.set_exception(
                        WriteContention("the charge was interrupted before it applied; retry")
                    )

    async def _commit_taken(
        self, owner: str, counters: Sequence[Counter], charges: list[_Charge]
    ) -> None:
        heads = asyncio.ensure_future(asyncio.gather(*(self._head(c.key) for c in counters)))
        keyed = any(not c.key_recorded.done() for c in charges)
        if keyed and all(charge.delta > 0 for charge in charges):
            await self._commit_growth_keyed(owner, counters, charges, heads)
            return
        pending: list[asyncio.Future[Any]] = [heads, *(c.key_recorded for c in charges)]
        await asyncio.wait(pending)
        live = _settle_unrecorded(charges)
        failure = heads.exception()
        if failure is not None:
            for charge in live:
                charge.result.set_exception(failure)
            return
        if not live:
            return
        reads: list[tuple[int, int] | None] = [
            self._newer_than_head(counter.key, head)
            for counter, head in zip(counters, heads.result(), strict=True)
        ]
        total = sum(charge.delta for charge in live)
        try:
            values = await self._step_all(owner, counters, total, reads)
        except QuotaExceeded as refused:
            if len(live) == 1:
                live[0].result.set_exception(refused)
                return
            await self._commit_one_by_one(owner, counters, live)
            return
        except EngramError as error:
            for charge in live:
                charge.result.set_exception(error)
            return
        _settle_values(live, values)

    async def _commit_growth_keyed(
        self,
        owner: str,
        counters: Sequence[Counter],
        charges: list[_Charge],
        heads: asyncio.Future[list[tuple[int, int]]],
    ) -> None:
        """Growing charges whose keys are still being recorded: the group steps by its whole
        sum as soon as the heads are read, while the keys' inserts land, so a remote charge
        waits for one key insert less than `_commit_taken`'s way (QuotaService's charges
        all carry keys). Then the charges whose key was taken already (replays) or failed
        are reversed (a shrink, never refused) and settled as such: a replay never stays
        applied; while one is in flight the counters over-count it for a moment, which can
        refuse a racing charge, never let one pass a limit. A refused sum waits for the
        keys and applies the live charges one at a time; a failure is the live charges'."""
        keys = {charge.key_recorded for charge in charges}
        await asyncio.wait({heads})
        failure = heads.exception()
        if failure is not None:
            await asyncio.wait(keys)
            for charge in _settle_unrecorded(charges):
                charge.result.set_exception(failure)
            return
        reads: list[tuple[int, int] | None] = [
            self._newer_than_head(counter.key, head)
            for counter, head in zip(counters, heads.result(), strict=True)
        ]
        try:
            values = await self._step_all(owner, counters, sum(c.delta for c in charges), reads)
        except QuotaExceeded:
            await asyncio.wait(keys)
            await self._commit_one_by_one(owner, counters, _settle_unrecorded(charges))
            return
        except EngramError as error:
            await asyncio.wait(keys)
            for charge in _settle_unrecorded(charges):
                charge.result.set_exception(error)
            return
        # Applied: settle every charge (reversing the replays) even if this task is
        # cancelled meanwhile, so no applied charge is ever reported as not applied.
        settling = asyncio.ensure_future(self._settle_applied(owner, counters, charges, values))
        try:
            await asyncio.shield(settling)
        except asyncio.CancelledError:
            await asyncio.wait({settling})
            raise

    async def _settle_applied(
        self,
        owner: str,
        counters: Sequence[Counter],
        charges: list[_Charge],
        values: dict[str, int],
    ) -> None:
        await asyncio.wait({charge.key_recorded for charge in charges})
        live = _settle_unrecorded(charges)
        returned = sum(charge.delta for charge in charges) - sum(c.delta for c in live)
        if returned:
            try:
                values = await self._step_all(owner, counters, -returned, [None] * len(counters))
            except EngramError:
                # The counters over-count the replays until Reconcile, as after a crash
                # between steps (never past a limit); the live charges did apply.
                log.warning("could not reverse %d replayed bytes on %s", returned, owner)
                values = {key: apply_delta(value, -returned) for key, value in values.items()}
        _settle_values(live, values)

    async def _commit_one_by_one(
        self, owner: str, counters: Sequence[Counter], live: list[_Charge]
    ) -> None:
        """The group's sum does not fit: one at a time, so exactly the charges that fit apply."""
        for charge in live:
            try:
                values = await self._step_all(owner, counters, charge.delta, [None] * len(counters))
            except EngramError as error:
                charge.result.set_exception(error)
            else:
                charge.result.set_result(values)

    async def _record_key(self, idempotency_key: str) -> bool:
        """Takes the charge's key; False when a charge with that key was already recorded."""
        with mongo_errors("recording a charge"):
            try:
                await self._key_inserts.insert({"_id": idempotency_key, "at": datetime.now(UTC)})
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

    async def org_of(self, tenant: str) -> str | None:
        with mongo_errors("reading an org membership"):
            row = await self._org_members.find_one({"_id": tenant})
        return str(row["org"]) if row else None

    async def set_org(self, tenant: str, org: str | None) -> None:
        with mongo_errors("setting an org membership"):
            if org is None:
                await self._org_members.delete_one({"_id": tenant})
                return
            await self._org_members.replace_one(
                {"_id": tenant}, {"org": org, "at": datetime.now(UTC)}, upsert=True
            )

    async def org_members(self, org: str) -> list[str]:
        with mongo_errors("listing an org's members"):
            rows = await self._org_members.find({"org": org}, projection={"_id": 1}).to_list(
                length=None
            )
        return sorted(str(row["_id"]) for row in rows)


def _settle_unrecorded(charges: list[_Charge]) -> list[_Charge]:
    """Settles the charges whose key could not be taken (an error, or a replay: None) and
    returns the rest, the ones the group applies."""
    live: list[_Charge] = []
    for charge in charges:
        failure = charge.key_recorded.exception()
        if failure is not None:
            charge.result.set_exception(failure)
        elif not charge.key_recorded.result():
            charge.result.set_result(None)
        else:
            live.append(charge)
    return live


def _settle_values(live: list[_Charge], values: Mapping[str, int]) -> None:
    """Each charge of an applied group sees the values as they stood after its own step."""
    after = 0
    for charge in reversed(live):
        charge.result.set_result({key: apply_delta(value, -after) for key, value in values.items()})
        after += charge.delta
