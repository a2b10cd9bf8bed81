"""The maintenance worker's stores on SQLite and on FerretDB: a lease has one holder at a
time however many race for it, a crashed holder's lease (never released) expires, job runs
list newest first page by page, and a space's settings round-trip."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.maintenance import JobOutcome, JobRun, LogRetention, SpaceSettings
from engram.domain.spaces import SpaceRef, Visibility
from engram.maintenance.mongo_stores import (
    KEPT_GENERATIONS,
    MongoJobRunStore,
    MongoLeaseStore,
    MongoSpaceSettingsStore,
)
from engram.maintenance.ports import JobRunStore, LeaseStore, SpaceSettingsStore
from engram.maintenance.sqlite_stores import (
    SCHEMA,
    SqliteJobRunStore,
    SqliteLeaseStore,
    SqliteSpaceSettingsStore,
)
from tests.support.backends import RealBackends
from tests.support.clock import ManualClock

pytestmark = pytest.mark.contract

TTL = timedelta(seconds=30)
NOTES = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")
WIKI = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="wiki")


@dataclass
class Stores:
    leases: LeaseStore
    runs: JobRunStore
    settings: SpaceSettingsStore
    clock: ManualClock
    kind: str


@pytest.fixture(params=["sqlite", "mongo"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Stores]:
    clock = ManualClock()
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "maintenance.db")
        await database.open([SCHEMA])
        yield Stores(
            SqliteLeaseStore(database, clock=clock),
            SqliteJobRunStore(database),
            SqliteSpaceSettingsStore(database),
            clock,
            "sqlite",
        )
        await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    client, mongo = connect(real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}")
    leases = MongoLeaseStore(mongo, clock=clock)
    runs = MongoJobRunStore(mongo)
    for store in (leases, runs, leases, runs):  # twice: idempotent
        await store.ensure_indexes()
    yield Stores(leases, runs, MongoSpaceSettingsStore(mongo), clock, "mongo")
    await client.drop_database(mongo.name)
    await client.close()


# --- leases ----------------------------------------------------------------------------------


async def test_a_held_lease_refuses_a_second_holder_until_released(stores: Stores) -> None:
    leases = stores.leases
    first = await leases.acquire("dream|space", "worker-a#1", TTL)
    assert first is not None and first.holder == "worker-a#1"
    assert await leases.acquire("dream|space", "worker-b#1", TTL) is None
    assert await leases.acquire("hygiene|space", "worker-b#1", TTL) is not None, "other key"
    current = await leases.current("dream|space")
    assert current is not None and current.holder == "worker-a#1"
    await leases.release(first)
    assert await leases.current("dream|space") is None
    second = await leases.acquire("dream|space", "worker-b#1", TTL)
    assert second is not None and second.holder == "worker-b#1"


async def test_a_crashed_holders_lease_expires(stores: Stores) -> None:
    """The holder never releases (it crashed): the lease is taken once it has expired, and
    the crashed holder's late renewal is refused."""
    leases = stores.leases
    crashed = await leases.acquire("dream|space", "worker-a#1", TTL)
    assert crashed is not None
    stores.clock.advance(seconds=29)
    assert await leases.acquire("dream|space", "worker-b#1", TTL) is None, "not yet expired"
    stores.clock.advance(seconds=2)
    assert await leases.current("dream|space") is None
    taken = await leases.acquire("dream|space", "worker-b#1", TTL)
    assert taken is not None and taken.holder == "worker-b#1"
    assert await leases.renew(crashed, TTL) is None, "the old holder lost it"
    await leases.release(crashed)  # a late release leaves the new holder's lease alone
    current = await leases.current("dream|space")
    assert current is not None and current.holder == "worker-b#1"


async def test_renewing_keeps_the_lease_past_its_first_expiry(stores: Stores) -> None:
    leases = stores.leases
    lease = await leases.acquire("dream|space", "worker-a#1", TTL)
    assert lease is not None
    for _ in range(KEPT_GENERATIONS + 4):  # past the history Mongo keeps
        stores.clock.advance(seconds=20)
        renewed = await leases.renew(lease, TTL)
        assert renewed is not None
        lease = renewed
        assert await leases.acquire("dream|space", "worker-b#1", TTL) is None
    await leases.release(lease)
    assert await leases.acquire("dream|space", "worker-b#1", TTL) is not None


async def test_racing_holders_get_one_lease(stores: Stores) -> None:
    for round_ in range(3):
        key = f"dream|space-{round_}"
        results = await asyncio.gather(
            *(stores.leases.acquire(key, f"worker-{n}#1", TTL) for n in range(12))
        )
        winners = [lease for lease in results if lease is not None]
        assert len(winners) == 1, f"{len(winners)} holders at once"
        current = await stores.leases.current(key)
        assert current is not None and current.holder == winners[0].holder


# --- job runs --------------------------------------------------------------------------------


def _run(stores: Stores, job: str, space: SpaceRef, n: int) -> JobRun:
    return JobRun(
        run_id=f"run-{n:03d}",
        job=job,
        space=space,
        started_at=stores.clock(),
        outcome=JobOutcome.RUNNING,
        worker="host:1",
        on_demand=n % 2 == 0,
    )


async def test_runs_list_newest_first_page_by_page(stores: Stores) -> None:
    runs = stores.runs
    recorded: list[JobRun] = []
    for n in range(7):
        run = _run(stores, "dream" if n % 3 else "staleness_report", NOTES if n < 5 else WIKI, n)
        await runs.start(run)
        stores.clock.advance(seconds=1 if n != 3 else 0)  # two runs started in one microsecond
        finished = replace(
            run,
            outcome=JobOutcome.SUCCEEDED,
            finished_at=stores.clock(),
            counts={"promoted": n},
            message=f"run {n}",
            details=("a.md", "b.md"),
        )
        await runs.finish(finished)
        recorded.append(finished)
    newest_first = sorted(recorded, key=lambda r: (r.started_at, r.run_id), reverse=True)
    seen: list[JobRun] = []
    before = None
    while True:
        page = await runs.page(space_id=None, job=None, before=before, limit=3)
        seen.extend(page)
        if len(page) < 3:
            break
        last = page[-1]
        before = (int(last.started_at.timestamp() * 1_000_000), last.run_id)
    assert [r.run_id for r in seen] == [r.run_id for r in newest_first]
    assert seen[0] == newest_first[0], "every field round-trips"
    notes = await runs.page(space_id=NOTES.id, job="dream", before=None, limit=10)
    assert [r.run_id for r in notes] == ["run-004", "run-002", "run-001"]


async def test_last_runs_by_job_and_space(stores: Stores) -> None:
    runs = stores.runs
    ok = _run(stores, "dream", NOTES, 1)
    await runs.start(ok)
    stores.clock.advance(seconds=5)
    await runs.finish(replace(ok, outcome=JobOutcome.SUCCEEDED, finished_at=stores.clock()))
    succeeded_at = stores.clock()
    stores.clock.advance(hours=1)
    bad = _run(stores, "dream", NOTES, 2)
    await runs.start(bad)
    await runs.finish(replace(bad, outcome=JobOutcome.FAILED, finished_at=stores.clock()))
    last = await runs.last_runs([NOTES.id, WIKI.id])
    assert set(last) == {("dream", NOTES.id)}
    assert last["dream", NOTES.id].succeeded_at == succeeded_at
    assert last["dream", NOTES.id].failed_at == stores.clock()


async def test_an_abandoned_run_is_closed_as_failed(stores: Stores) -> None:
    await stores.runs.start(_run(stores, "dream", NOTES, 1))
    await stores.runs.start(_run(stores, "dream", WIKI, 2))
    stores.clock.advance(minutes=3)
    assert await stores.runs.abandon("dream", NOTES.id, stores.clock(), "worker stopped") == 1
    (closed,) = await stores.runs.page(space_id=NOTES.id, job="", before=None, limit=5)
    assert closed.outcome is JobOutcome.FAILED and closed.message == "worker stopped"
    assert closed.finished_at == stores.clock()
    (other,) = await stores.runs.page(space_id=WIKI.id, job="", before=None, limit=5)
    assert other.outcome is JobOutcome.RUNNING, "another space's run is not touched"


async def test_old_finished_runs_are_pruned(stores: Stores) -> None:
    for n in range(4):
        run = _run(stores, "dream", NOTES, n)
        await stores.runs.start(run)
        if n != 1:
            await stores.runs.finish(replace(run, outcome=JobOutcome.SUCCEEDED))
        stores.clock.advance(days=1)
    cutoff = stores.clock() - timedelta(days=2, hours=12)
    assert await stores.runs.prune(cutoff, limit=100) == 1, "run-000 only: run-001 runs"
    left = await stores.runs.page(space_id=None, job=None, before=None, limit=10)
    assert sorted(r.run_id for r in left) == ["run-001", "run-002", "run-003"]


# --- settings --------------------------------------------------------------------------------


async def test_space_settings_round_trip(stores: Stores) -> None:
    assert await stores.settings.get_many([NOTES.id]) == {}
    chosen = SpaceSettings(
        dream_enabled=True,
        log_retention=LogRetention.ARCHIVE,
        max_daily_logs=10,
        log_retention_days=30,
        stale_after_days=7,
    )
    await stores.settings.put(NOTES.id, chosen)
    assert await stores.settings.get_many([NOTES.id, WIKI.id]) == {NOTES.id: chosen}
    await stores.settings.put(NOTES.id, SpaceSettings())
    assert await stores.settings.get_many([NOTES.id]) == {NOTES.id: SpaceSettings()}
