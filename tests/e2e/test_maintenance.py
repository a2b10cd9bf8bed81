"""The maintenance worker: scheduled runs once per period between several workers (SQLite
and FerretDB), a crashed worker's run taken over, RunJob / ListJobRuns / settings over gRPC,
and the per-job metrics.

The job here is the tests' own (tests/support/maintenance_jobs.py); the real jobs, dreaming
and hygiene, have their own tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client import REGISTRY, generate_latest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.authz.enforcement import FixedPrincipalAuthenticator
from engram.backends.mongo import connect
from engram.client import (
    AsyncClient,
    Conflict,
    InvalidArgument,
    RateLimited,
    Space,
    SpaceMaintenance,
    Unavailable,
)
from engram.domain.errors import EngramError
from engram.domain.maintenance import JobOutcome, JobReport, JobRun, SpaceSettings
from engram.domain.maintenance_rules import lease_key
from engram.domain.principals import LOCAL_ADMIN, MAINTENANCE
from engram.domain.spaces import SpaceRef, Visibility
from engram.maintenance.mongo_stores import (
    MongoJobRunStore,
    MongoLeaseStore,
    MongoSpaceSettingsStore,
)
from engram.maintenance.ports import (
    Job,
    JobRunStore,
    LeaseStore,
    MaintenanceDeps,
    SpaceSettingsStore,
    SpaceSource,
)
from engram.maintenance.sqlite_stores import (
    SqliteJobRunStore,
    SqliteLeaseStore,
    SqliteSpaceSettingsStore,
)
from engram.maintenance.worker import MaintenanceWorker, WorkerConfig
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.ports import DocumentRepository
from tests.e2e.test_cli import Cli
from tests.support.backends import RealBackends
from tests.support.clock import ManualClock
from tests.support.maintenance_jobs import DAY, UsageSnapshotJob
from tests.support.settings import server_settings

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")
WIKI = Space(name="wiki")


class FailingJob:
    """Always fails the way a job meets a refused write: an EngramError."""

    name: ClassVar[str] = "always_fails"

    def scheduled(self, settings: SpaceSettings) -> bool:
        return settings.dream_enabled

    def interval(self, settings: SpaceSettings) -> timedelta:
        return DAY

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        raise EngramError("the model answered 500")


def _ref(name: str) -> SpaceRef:
    return SpaceRef.create(Visibility.PRIVATE, tenant="local", name=name)


# --- several workers on one store ------------------------------------------------------------


@dataclass
class Shared:
    """What two worker processes share: the documents (spaces to walk) and the stores."""

    spaces: SpaceSource
    leases: LeaseStore
    runs: JobRunStore
    settings: SpaceSettingsStore
    deps: MaintenanceDeps
    clock: ManualClock


class RepositorySpaces:
    """The worker's SpaceSource straight over a document repository (the documents these
    workers share), a page being the spaces after the last one's id."""

    def __init__(self, repository: DocumentRepository) -> None:
        self._repository = repository

    async def space_page(self, *, page_token: str, limit: int) -> tuple[list[SpaceRef], str]:
        spaces = await self._repository.all_spaces(after=page_token, limit=limit)
        return spaces, spaces[-1].id if len(spaces) == limit else ""


def _workers(shared: Shared, count: int) -> list[MaintenanceWorker]:
    return [
        MaintenanceWorker(
            [UsageSnapshotJob(shared.deps)],
            shared.spaces,
            shared.leases,
            shared.runs,
            shared.settings,
            WorkerConfig(lease_seconds=30, space_page=2),
            name=f"worker-{n}",
            clock=shared.clock,
        )
        for n in range(count)
    ]


SPACES = ["alpha", "beta", "gamma", "delta", "epsilon"]


@pytest.fixture(params=["sqlite", "mongo"])
async def shared(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Shared]:
    clock = ManualClock()
    async with embedded_engram(server_settings(tmp_path / "engram"), clock=clock) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}") as storage:
            for name in SPACES:
                await storage.write_document("MEMORY.md", f"# {name}", space=Space(name=name))
        deps = engram.maintenance.deps
        if request.param == "sqlite":
            database = engram.database
            yield Shared(
                RepositorySpaces(engram.repository),
                SqliteLeaseStore(database, clock=clock),
                SqliteJobRunStore(database),
                SqliteSpaceSettingsStore(database),
                deps,
                clock,
            )
            return
        request.applymarker(pytest.mark.real_backend)
        from engram.app.production import storage_on_mongo

        db_name = f"engram_{uuid.uuid4().hex[:12]}"
        settings = server_settings(
            tmp_path / "mongo", mongo_uri=real_backends.url("mongo"), mongo_db=db_name
        )
        async with storage_on_mongo(
            settings,
            publish_events=False,
            authenticator=FixedPrincipalAuthenticator(LOCAL_ADMIN),
        ) as server:
            async with AsyncClient(f"127.0.0.1:{server.port}") as mongo_storage:
                for name in SPACES:
                    await mongo_storage.write_document(
                        "MEMORY.md", f"# {name}", space=Space(name=name)
                    )
            client, mongo = connect(real_backends.url("mongo"), db_name)
            leases, runs = MongoLeaseStore(mongo, clock=clock), MongoJobRunStore(mongo)
            for store in (leases, runs):
                await store.ensure_indexes()
            try:
                yield Shared(
                    RepositorySpaces(MongoDocumentRepository(mongo, retention=5)),
                    leases,
                    runs,
                    MongoSpaceSettingsStore(mongo),
                    deps,
                    clock,
                )
            finally:
                await client.drop_database(db_name)
                await client.close()


def _by_space(runs: list[JobRun]) -> dict[str, list[JobRun]]:
    found: dict[str, list[JobRun]] = {}
    for run in runs:
        found.setdefault(run.space.name, []).append(run)
    return found


async def test_two_workers_run_each_job_once_per_period_between_them(shared: Shared) -> None:
    a, b = _workers(shared, 2)
    first = [run for runs in await asyncio.gather(a.tick(), b.tick()) for run in runs]
    per_space = _by_space(first)
    assert sorted(per_space) == sorted(SPACES), "every space walked (pages of 2)"
    assert all(len(runs) == 1 for runs in per_space.values()), per_space
    assert all(run.outcome is JobOutcome.SUCCEEDED for run in first)
    assert all(
        run.counts == {"documents": 1, "bytes": len("# ") + len(run.space.name)} for run in first
    )
    assert [] == [run for runs in await asyncio.gather(a.tick(), b.tick()) for run in runs], (
        "not due again within the period"
    )
    shared.clock.advance(hours=23)
    assert await a.tick() == [] and await b.tick() == []
    shared.clock.advance(hours=1)
    second = [run for runs in await asyncio.gather(b.tick(), a.tick()) for run in runs]
    assert sorted(run.space.name for run in second) == sorted(SPACES), "once more per space"
    listed = await shared.runs.page(space_id=None, job="usage_snapshot", before=None, limit=100)
    assert len(listed) == 2 * len(SPACES)


async def test_a_crashed_workers_run_is_taken_over_after_its_lease_expires(
    shared: Shared,
) -> None:
    leases, runs = shared.leases, shared.runs
    ref = _ref("alpha")
    # A worker took the lease, recorded its run, and died: no finish, no release.
    assert await leases.acquire(
        lease_key("usage_snapshot", ref.id), "dead#1", timedelta(seconds=30)
    )
    dead = JobRun(
        run_id="dead-run",
        job="usage_snapshot",
        space=ref,
        started_at=shared.clock(),
        outcome=JobOutcome.RUNNING,
        worker="dead",
        on_demand=False,
    )
    await runs.start(dead)
    (worker,) = _workers(shared, 1)
    done = await worker.tick()
    assert "alpha" not in {run.space.name for run in done}, "the lease still holds"
    shared.clock.advance(seconds=31)
    done = await worker.tick()
    assert [run.space.name for run in done] == ["alpha"]
    history = await runs.page(space_id=ref.id, job="", before=None, limit=10)
    assert [(r.run_id == "dead-run", r.outcome) for r in history] == [
        (False, JobOutcome.SUCCEEDED),
        (True, JobOutcome.FAILED),
    ]
    assert "stopped before it finished" in history[1].message


async def test_a_run_past_its_time_limit_or_its_lease_is_stopped_and_failed(
    shared: Shared,
) -> None:
    gate = asyncio.Event()  # never opened: the run waits until it is stopped
    job = UsageSnapshotJob(shared.deps, gate=gate)

    def worker(**config: float) -> MaintenanceWorker:
        return MaintenanceWorker(
            [job],
            shared.spaces,
            shared.leases,
            shared.runs,
            shared.settings,
            WorkerConfig(**config),  # type: ignore[arg-type]
            clock=shared.clock,
        )

    slow = await worker(run_timeout_seconds=0.2).run_now("usage_snapshot", _ref("alpha"))
    assert slow.outcome is JobOutcome.FAILED
    assert "ENGRAM_MAINTENANCE_RUN_TIMEOUT_SECONDS" in slow.message
    key = lease_key("usage_snapshot", _ref("beta").id)
    job.started.clear()
    running = asyncio.ensure_future(worker(lease_seconds=3).run_now("usage_snapshot", _ref("beta")))
    await asyncio.wait_for(job.started.wait(), 30)
    shared.clock.advance(seconds=4)  # the lease expired before its renewal (every 1 s)
    assert await shared.leases.acquire(key, "other#1", timedelta(seconds=60)) is not None
    lost = await asyncio.wait_for(running, 30)
    assert lost.outcome is JobOutcome.FAILED and "lost its lease" in lost.message
    current = await shared.leases.current(key)
    assert current is not None and current.holder == "other#1", "the new holder keeps it"


# --- the service over gRPC -------------------------------------------------------------------


@dataclass
class Served:
    engram: EmbeddedEngram
    # engram.client in the space "notes".
    client: AsyncClient
    jobs: list[Job]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    built: list[Job] = []
    gate = asyncio.Event()
    gate.set()

    def jobs(deps: MaintenanceDeps) -> list[Job]:
        built.extend([UsageSnapshotJob(deps, gate=gate), FailingJob()])
        return built

    async with embedded_engram(
        server_settings(tmp_path / "engram"), maintenance_jobs=jobs
    ) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            await client.write_document("MEMORY.md", "remember")
            yield Served(engram, client, built)


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_run_job_runs_now_and_records_the_run(served: Served) -> None:
    succeeded = _sample("engram_maintenance_runs_total", job="usage_snapshot", outcome="succeeded")
    run = await served.client.run_job("usage_snapshot")
    assert run.outcome == "succeeded" and run.on_demand
    assert dict(run.counts) == {"documents": 1, "bytes": len("remember")}
    assert run.space_id == _ref("notes").id and run.finished_at is not None
    listed = await served.client.list_job_runs()
    assert [r.run_id for r in listed.items] == [run.run_id]
    after = _sample("engram_maintenance_runs_total", job="usage_snapshot", outcome="succeeded")
    assert after == succeeded + 1
    assert _sample("engram_maintenance_last_success_timestamp_seconds", job="usage_snapshot") > 0
    exposed = generate_latest(REGISTRY).decode()
    for metric in (
        "engram_maintenance_runs_total",
        "engram_maintenance_failures_total",
        "engram_maintenance_run_seconds",
        "engram_maintenance_last_success_timestamp_seconds",
    ):
        assert metric in exposed, metric


async def test_a_failing_job_is_recorded_failed_with_its_message(served: Served) -> None:
    failures = _sample("engram_maintenance_failures_total", job="always_fails")
    run = await served.client.run_job("always_fails")
    assert run.outcome == "failed"
    assert run.message == "the model answered 500"
    assert _sample("engram_maintenance_failures_total", job="always_fails") == failures + 1


async def test_run_job_refuses_an_unknown_job_naming_the_known_ones(served: Served) -> None:
    with pytest.raises(InvalidArgument) as failure:
        await served.client.run_job("defrag")
    assert "always_fails, usage_snapshot" in failure.value.message
    with pytest.raises(InvalidArgument):
        await served.client.run_job("")


async def test_run_job_is_aborted_while_a_run_holds_the_lease(served: Served) -> None:
    snapshot = served.jobs[0]
    assert isinstance(snapshot, UsageSnapshotJob)
    gate = snapshot._gate
    assert gate is not None
    gate.clear()
    client = served.client
    first = asyncio.ensure_future(client.run_job("usage_snapshot"))
    await asyncio.wait_for(snapshot.started.wait(), 30)
    with pytest.raises(Conflict) as failure:
        await client.run_job("usage_snapshot")
    assert "already running" in failure.value.message
    other = await client.run_job("always_fails")
    assert other.outcome == "failed", "another job is not held"
    listed = await client.list_job_runs()
    assert "running" in [r.outcome for r in listed.items]
    gate.set()
    assert (await first).outcome == "succeeded"
    again = await client.run_job("usage_snapshot")
    assert again.outcome == "succeeded", "released"


async def test_list_job_runs_pages_newest_first(served: Served) -> None:
    client = served.client
    made = []
    for _ in range(5):
        made.append((await client.run_job("usage_snapshot")).run_id)
    await client.run_job("always_fails")
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await client.list_job_runs(job="usage_snapshot", page_size=2, page_token=token)
        pages += 1
        seen.extend(run.run_id for run in page.items)
        if not page.next_page_token:
            break
        token = page.next_page_token
    assert seen == list(reversed(made)) and pages == 3
    every = await client.list_job_runs(all_spaces=True)
    assert len(every.items) == 6, "no space: every space's runs (platform admin)"
    with pytest.raises(InvalidArgument):
        await client.list_job_runs(space=WIKI, page_token=token)
    with pytest.raises(InvalidArgument):
        await client.list_job_runs(all_spaces=True, page_size=-1)


async def test_space_settings_round_trip(served: Served) -> None:
    client = served.client
    defaults = await client.get_space_maintenance()
    assert not defaults.dream_enabled
    # Seed 000's hygiene by default: archive past 60 daily logs.
    assert defaults.log_retention == "archive"
    assert (defaults.max_daily_logs, defaults.stale_after_days) == (60, 90)
    chosen = SpaceMaintenance(
        dream_enabled=True, log_retention="archive", max_daily_logs=14, log_retention_days=30
    )
    saved = await client.set_space_maintenance(chosen)
    expected = SpaceMaintenance(
        dream_enabled=True,
        log_retention="archive",
        max_daily_logs=14,
        log_retention_days=30,
        stale_after_days=90,
    )
    assert saved == expected, "0 = the default"
    assert await client.get_space_maintenance() == expected
    assert not (await client.get_space_maintenance(space=WIKI)).dream_enabled
    with pytest.raises(InvalidArgument) as failure:
        await client.set_space_maintenance(SpaceMaintenance(max_daily_logs=-1))
    assert "max_daily_logs" in failure.value.message
    # The settings steer the schedule: FailingJob runs only where dreaming is on.
    done = await served.engram.maintenance.worker.tick()
    assert sorted(run.job for run in done) == ["always_fails", "usage_snapshot"]


async def test_the_schedule_runs_jobs_by_itself(tmp_path: Path) -> None:
    settings = server_settings(
        tmp_path / "engram", maintenance_schedule=True, maintenance_tick_seconds=0.2
    )

    def jobs(deps: MaintenanceDeps) -> list[Job]:
        assert deps.principal == MAINTENANCE
        return [UsageSnapshotJob(deps)]

    async with embedded_engram(settings, maintenance_jobs=jobs) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            await client.write_document("MEMORY.md", "x")
            async with asyncio.timeout(30):
                while True:
                    if (await client.list_job_runs()).items:
                        break
                    await asyncio.sleep(0.1)
            await asyncio.sleep(0.6)  # three more ticks: not due again
            (run,) = (await client.list_job_runs()).items
            assert run.outcome == "succeeded" and not run.on_demand


async def test_engram_jobs_cli(served: Served) -> None:
    cli = Cli(served.engram.port)
    ran = await cli("jobs", "run", "usage_snapshot", "--name", "notes")
    assert "usage_snapshot on v1:private:local::::notes: succeeded" in ran
    assert "documents=1" in ran and "1 documents" in ran
    failed = await cli("jobs", "run", "always_fails", "--name", "notes", ok=False)
    assert "failed" in failed and "the model answered 500" in failed
    unknown = await cli("jobs", "run", "defrag", "--name", "notes", ok=False)
    assert "INVALID_ARGUMENT" in unknown and "usage_snapshot" in unknown
    listed = await cli("jobs", "--space", "notes", "--job", "usage_snapshot")
    assert "usage_snapshot (on demand)" in listed and "always_fails" not in listed
    assert "always_fails" in await cli("jobs")
    shown = await cli("jobs", "settings", "--name", "notes")
    assert "dream: off" in shown and "log retention: archive" in shown
    changed = await cli(
        "jobs",
        "settings",
        "--name",
        "notes",
        "--dream",
        "--log-retention",
        "archive",
        "--retention-days",
        "30",
        "--max-daily-logs",
        "10",
        "--stale-after-days",
        "7",
    )
    assert (
        "dream: on" in changed
        and "log retention: archive (days: 30, max daily logs: 10)" in changed
    )
    assert "stale after: 7 days" in changed
    assert "dream: on" in await cli("jobs", "settings", "--name", "notes", "--retention-days", "0")
    refused = await cli("jobs", "settings", "--name", "notes", "--max-daily-logs", "-3", ok=False)
    assert "max_daily_logs" in refused


async def test_an_on_demand_run_outlives_its_caller_and_runs_are_bounded(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    def jobs(deps: MaintenanceDeps) -> list[Job]:
        return [UsageSnapshotJob(deps, gate=gate)]

    settings = server_settings(tmp_path / "engram", maintenance_max_on_demand=1)
    async with embedded_engram(settings, maintenance_jobs=jobs) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            # The caller gives up after 0.5 s: its deadline passed, the run goes on.
            with pytest.raises(Unavailable) as gone:
                await client.with_options(timeout=0.5).run_job("usage_snapshot")
            assert gone.value.metadata["code"] == "DEADLINE_EXCEEDED"
            with pytest.raises(RateLimited):
                await client.run_job("usage_snapshot", space=WIKI)
            gate.set()
            async with asyncio.timeout(30):
                while True:
                    (run,) = (await client.list_job_runs()).items
                    if run.outcome != "running":
                        break
                    await asyncio.sleep(0.05)
            assert run.outcome == "succeeded", run.message
            assert (await client.run_job("usage_snapshot", space=WIKI)).outcome == "succeeded"


async def test_engram_dev_runs_the_configured_jobs(tmp_path: Path) -> None:
    """Without a test job list the worker runs the composition root's jobs: dreaming is one,
    and without a chat model its run fails saying which settings it needs."""
    async with embedded_engram(server_settings(tmp_path / "engram")) as engram:
        assert "dream" in engram.maintenance.worker.job_names
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            run = await client.run_job("dream")
    assert run.outcome == "failed"
    assert "ENGRAM_LLM_BASE_URL" in run.message
