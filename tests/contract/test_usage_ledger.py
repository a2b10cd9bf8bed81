"""The usage ledger on SQLite and on FerretDB: racing charges on the same counters (committed
as groups on MongoDB) apply exactly the ones that fit, a replayed key applies once, a charge
cancelled while it waits never applies, and two ledgers (two processes) charging the same
counters lose nothing. On MongoDB the entry history stays bounded and reads see the newest
entry however far the head lags."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.backends.mongo import MongoDatabase, connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.errors import QuotaExceeded
from engram.domain.quotas import Counter
from engram.quota.mongo_ledger import BUCKET, HEAD_EVERY, KEEP_STEPS, MongoUsageLedger
from engram.quota.ports import UsageLedger
from engram.quota.sqlite_ledger import SCHEMA, SqliteUsageLedger
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract

OWNER = "tenant:acme"


def counters(space_limit: int | None, tenant_limit: int | None = None) -> list[Counter]:
    return [
        Counter("space:acme/s1", "space", space_limit, "space s1"),
        Counter("tenant:acme", "tenant", tenant_limit, "tenant acme"),
    ]


class Ledgers:
    """Opens ledgers on one database (each a process of its own, as far as it knows)."""

    def __init__(self, backend: str, tmp_path: Path, real_backends: RealBackends) -> None:
        self.backend = backend
        self._tmp_path = tmp_path
        self._real_backends = real_backends
        self.mongo: MongoDatabase | None = None
        self._sqlite: list[SqliteDatabase] = []
        self._closers: list[object] = []

    async def open(self) -> UsageLedger:
        if self.backend == "sqlite":
            database = SqliteDatabase(self._tmp_path / "ledger.db")
            await database.open([SCHEMA])
            self._sqlite.append(database)
            return SqliteUsageLedger(database)
        if self.mongo is None:
            client, self.mongo = connect(
                self._real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}"
            )
            self._closers.append(client)
        ledger = MongoUsageLedger(self.mongo)
        await ledger.ensure_indexes()
        return ledger

    async def close(self) -> None:
        for database in self._sqlite:
            await database.close()
        for client in self._closers:
            assert self.mongo is not None
            await client.drop_database(self.mongo.name)  # type: ignore[attr-defined]
            await client.close()  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "mongo"])
async def ledgers(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Ledgers]:
    if request.param == "mongo":
        request.applymarker(pytest.mark.real_backend)
    opened = Ledgers(request.param, tmp_path, real_backends)
    yield opened
    await opened.close()


async def test_racing_charges_apply_exactly_what_fits(ledgers: Ledgers) -> None:
    ledger = await ledgers.open()
    limited = counters(space_limit=300)

    async def charge(i: int) -> bool:
        try:
            await ledger.apply(OWNER, limited, 10, f"grow-{i}")
        except QuotaExceeded as refused:
            assert refused.limit == "space"
            return False
        return True

    applied = await asyncio.gather(*(charge(i) for i in range(60)))
    assert sum(applied) == 30
    assert await ledger.read([c.key for c in limited]) == {"space:acme/s1": 300, "tenant:acme": 300}
    # Shrinks racing each other never go below zero.
    await asyncio.gather(*(ledger.apply(OWNER, limited, -40, f"shrink-{i}") for i in range(10)))
    assert await ledger.read([c.key for c in limited]) == {"space:acme/s1": 0, "tenant:acme": 0}


async def test_a_refusing_tenant_limit_reverses_the_space_step(ledgers: Ledgers) -> None:
    ledger = await ledgers.open()
    limited = counters(space_limit=None, tenant_limit=55)
    results = await asyncio.gather(
        *(ledger.apply(OWNER, limited, 10, f"k{i}") for i in range(8)), return_exceptions=True
    )
    refusals = [r for r in results if isinstance(r, QuotaExceeded)]
    assert len(refusals) == 3 and all(r.limit == "tenant" for r in refusals)
    assert await ledger.read([c.key for c in limited]) == {"space:acme/s1": 50, "tenant:acme": 50}


async def test_a_replayed_key_applies_once(ledgers: Ledgers) -> None:
    ledger = await ledgers.open()
    unlimited = counters(space_limit=None)
    outcomes = await asyncio.gather(
        *(ledger.apply(OWNER, unlimited, 7, "same-key") for _ in range(5)),
        *(ledger.apply(OWNER, unlimited, 1, f"other-{i}") for i in range(5)),
    )
    assert sum(outcome.applied for outcome in outcomes[:5]) == 1
    assert all(outcome.applied for outcome in outcomes[5:])
    assert (await ledger.read(["space:acme/s1"]))["space:acme/s1"] == 12
    again = await ledger.apply(OWNER, unlimited, 7, "same-key")
    assert not again.applied and again.values["space:acme/s1"] == 12


async def test_a_replay_at_the_limit_is_a_replay_and_leaves_the_counters(ledgers: Ledgers) -> None:
    """A growing charge steps before its key is known to be new (MongoDB): a replay that
    arrives when the counter is full, or beside live charges, still answers as a replay and
    the counters end as if it had never been sent."""
    ledger = await ledgers.open()
    full = counters(space_limit=10)
    assert (await ledger.apply(OWNER, full, 10, "fill")).applied
    replay = await ledger.apply(OWNER, full, 10, "fill")
    assert not replay.applied and replay.values["space:acme/s1"] == 10
    roomy = counters(space_limit=100)
    outcomes = await asyncio.gather(
        ledger.apply(OWNER, roomy, 10, "fill"),
        *(ledger.apply(OWNER, roomy, 5, f"more-{i}") for i in range(4)),
    )
    assert [o.applied for o in outcomes] == [False, True, True, True, True]
    assert await ledger.read([c.key for c in roomy]) == {"space:acme/s1": 30, "tenant:acme": 30}


async def test_a_cancelled_charge_applies_at_most_once(ledgers: Ledgers) -> None:
    ledger = await ledgers.open()
    unlimited = counters(space_limit=None)
    tasks = [asyncio.ensure_future(ledger.apply(OWNER, unlimited, 1, f"c{i}")) for i in range(20)]
    await asyncio.sleep(0)  # every charge has started
    tasks[-1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    value = (await ledger.read(["space:acme/s1"]))["space:acme/s1"]
    assert value in (19, 20)
    # Its key was freed (or it applied): a retry of the same charge ends at 20 either way.
    await ledger.apply(OWNER, unlimited, 1, "c19")
    assert (await ledger.read(["space:acme/s1"]))["space:acme/s1"] == 20


async def test_two_processes_charging_the_same_counters_lose_nothing(ledgers: Ledgers) -> None:
    first, second = await ledgers.open(), await ledgers.open()
    unlimited = counters(space_limit=None)
    # Rounds of concurrent charges through both, so each one's view of the counters goes
    # stale over and over (the other moves them further than the kept history).
    for round_ in range(6):
        await asyncio.gather(
            *(first.apply(OWNER, unlimited, 1, f"a{round_}-{i}") for i in range(12)),
            *(second.apply(OWNER, unlimited, 2, f"b{round_}-{i}") for i in range(12)),
        )
        if round_ % 2:
            # One ledger alone for a while: more steps than the history keeps.
            for i in range(KEEP_STEPS + BUCKET):
                await second.apply(OWNER, unlimited, 1, f"solo{round_}-{i}")
    expected = 6 * 12 * 3 + 3 * (KEEP_STEPS + BUCKET)
    for ledger in (first, second):
        assert await ledger.read([c.key for c in unlimited]) == {
            "space:acme/s1": expected,
            "tenant:acme": expected,
        }


@pytest.fixture
async def mongo_ledgers(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Ledgers]:
    opened = Ledgers("mongo", tmp_path, real_backends)
    yield opened
    await opened.close()


@pytest.mark.real_backend
async def test_mongo_history_stays_bounded_and_reads_see_past_a_lagging_head(
    mongo_ledgers: Ledgers,
) -> None:
    ledgers = mongo_ledgers
    ledger = await ledgers.open()
    unlimited = counters(space_limit=None)
    steps = 5 * KEEP_STEPS + 3
    for i in range(steps):
        await ledger.apply(OWNER, unlimited, 1, f"s{i}")
    assert ledgers.mongo is not None
    entries = ledgers.mongo["usage_entries"]
    kept = await entries.count_documents({"_id": {"$regex": "^space:acme/s1\n"}})
    assert KEEP_STEPS - BUCKET <= kept <= KEEP_STEPS + BUCKET
    head = await ledgers.mongo["usage_counters"].find_one({"_id": "space:acme/s1"})
    assert head is not None and steps - HEAD_EVERY < head["seq"] < steps, "the head lags"
    # A fresh ledger (another process) reads past the head to the newest entry.
    fresh = await ledgers.open()
    assert await fresh.read(["space:acme/s1"]) == {"space:acme/s1": steps}
    assert (await fresh.apply(OWNER, unlimited, 1, "fresh")).values["space:acme/s1"] == steps + 1


@pytest.mark.real_backend
async def test_mongo_a_charge_cancelled_while_it_queues_never_applies(
    mongo_ledgers: Ledgers,
) -> None:
    ledger = await mongo_ledgers.open()
    unlimited = counters(space_limit=None)
    tasks = [asyncio.ensure_future(ledger.apply(OWNER, unlimited, 1, f"c{i}")) for i in range(20)]
    await asyncio.sleep(0)  # the first charge holds the locks, the others queue behind it
    tasks[-1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[-1], asyncio.CancelledError)
    assert (await ledger.read(["space:acme/s1"]))["space:acme/s1"] == 19
    # Its key was freed: the retry applies.
    assert (await ledger.apply(OWNER, unlimited, 1, "c19")).applied
    assert (await ledger.read(["space:acme/s1"]))["space:acme/s1"] == 20


async def test_charges_without_a_key_each_apply_and_still_respect_the_limit(
    ledgers: Ledgers,
) -> None:
    """An in-process charge (never replayed) passes no key: each one applies, racing ones
    apply exactly as many as fit, and no key is kept for them."""
    ledger = await ledgers.open()
    await ledger.apply(OWNER, counters(100), 10, None)
    await ledger.apply(OWNER, counters(100), 10, None)
    outcomes = await asyncio.gather(
        *(ledger.apply(OWNER, counters(100), 10, None) for _ in range(12)),
        return_exceptions=True,
    )
    applied = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(applied) == 8 and all(o.applied for o in applied)
    assert all(isinstance(o, QuotaExceeded) for o in outcomes if isinstance(o, BaseException))
    assert await ledger.read(["space:acme/s1"]) == {"space:acme/s1": 100}
    if ledgers.mongo is not None:
        assert await ledgers.mongo["usage_keys"].count_documents({}) == 0


async def test_two_teams_of_one_org_charging_from_two_processes_never_pass_the_ceiling(
    ledgers: Ledgers,
) -> None:
    """Seed 003's org ceiling: each team's charges move its space, its tenant and the org's
    counter at once; racing from two ledgers (two processes), the teams together stop
    exactly at the ceiling, and every counter agrees with the charges that applied."""
    first, second = await ledgers.open(), await ledgers.open()

    def team(tenant: str) -> list[Counter]:
        return [
            Counter(f"space:{tenant}/s1", "space", None, f"space {tenant}"),
            Counter(f"tenant:{tenant}", "tenant", None, tenant),
            Counter("org:initech", "org_ceiling", 300, "initech"),
        ]

    async def charge(ledger: UsageLedger, tenant: str, i: int) -> str | None:
        try:
            await ledger.apply(f"tenant:{tenant}", team(tenant), 10, f"{tenant}-{i}")
        except QuotaExceeded as refused:
            return refused.limit
        return None

    results = await asyncio.gather(
        *(
            charge(first if i % 2 else second, "acme" if i % 4 < 2 else "globex", i)
            for i in range(60)
        )
    )
    assert results.count(None) == 30 and set(results) == {None, "org_ceiling"}
    values = await first.read(["tenant:acme", "tenant:globex", "org:initech"])
    assert values["org:initech"] == 300
    assert values["tenant:acme"] + values["tenant:globex"] == 300
