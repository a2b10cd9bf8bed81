"""The maintenance worker: every tick it walks every space, and runs each job that is
scheduled for the space's settings and due, under the job's lease for the space, one run at
a time; RunJob runs one job now under the same lease.

Several workers (replicas, or `engram dev` next to a `engram serve maintenance`) share one
store: a run takes the lease `<job>|<space id>` first and checks again that the job is still
due (another worker may have just run it), so each job runs once per period between them.
While a run lasts its lease is renewed; a worker that crashes stops renewing, its lease
expires, and the next worker marks the unfinished run failed and runs the job again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from prometheus_client import Counter, Gauge, Histogram

from engram.domain.errors import Conflict, EngramError, InvalidArgument, RateLimited
from engram.domain.maintenance import (
    MAX_RUN_DETAILS,
    JobOutcome,
    JobReport,
    JobRun,
    SpaceSettings,
)
from engram.domain.maintenance_rules import LastRuns, is_due, lease_key
from engram.domain.spaces import SpaceRef
from engram.maintenance.ports import (
    Job,
    JobRunStore,
    Lease,
    LeaseStore,
    SpaceSettingsStore,
    SpaceSource,
    utc_now,
)
from engram.runtime.tasks import cancel_and_wait

log = logging.getLogger(__name__)

# A run's message and each detail line are cut to this many characters when recorded.
MAX_MESSAGE_CHARS = 1000
MAX_DETAIL_CHARS = 500

RUNS = Counter(
    "engram_maintenance_runs_total", "Maintenance job runs, by job and outcome.", ["job", "outcome"]
)
FAILURES = Counter("engram_maintenance_failures_total", "Failed maintenance job runs.", ["job"])
RUN_SECONDS = Histogram(
    "engram_maintenance_run_seconds",
    "Duration of maintenance job runs.",
    ["job"],
    buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
)
LAST_SUCCESS = Gauge(
    "engram_maintenance_last_success_timestamp_seconds",
    "When a run of the job last succeeded in this process (Unix time).",
    ["job"],
)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    tick_seconds: float = 60.0
    lease_seconds: float = 120.0
    run_timeout_seconds: float = 3600.0
    retry_after_failure_seconds: float = 900.0
    run_retention_days: int = 30
    # RunJob runs at once per worker (the schedule runs one job at a time besides).
    max_on_demand: int = 4
    # Spaces read per page of the walk.
    space_page: int = 200


def worker_name() -> str:
    """host:pid, the `worker` of the runs this process records."""
    return f"{socket.gethostname()}:{os.getpid()}"


class MaintenanceWorker:
    def __init__(
        self,
        jobs: Sequence[Job],
        spaces: SpaceSource,
        leases: LeaseStore,
        runs: JobRunStore,
        settings: SpaceSettingsStore,
        config: WorkerConfig,
        *,
        name: str | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        names = [job.name for job in jobs]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"maintenance jobs with the same name: {duplicated}")
        self._jobs = {job.name: job for job in jobs}
        self._spaces = spaces
        self._leases = leases
        self._runs = runs
        self._settings = settings
        self._config = config
        self.name = name or worker_name()
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._on_demand: set[asyncio.Task[JobRun | None]] = set()

    @property
    def job_names(self) -> list[str]:
        return sorted(self._jobs)

    def job(self, name: str) -> Job:
        """The job called `name`; InvalidArgument listing the names otherwise."""
        job = self._jobs.get(name)
        if job is None:
            known = ", ".join(self.job_names) or "none configured"
            raise InvalidArgument(f"unknown job {name!r}; this worker runs: {known}", field="job")
        return job

    async def settings_of(self, space_id: str) -> SpaceSettings:
        return (await self._settings.get_many([space_id])).get(space_id, SpaceSettings())

    # --- the schedule ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="maintenance-worker")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        for task in list(self._on_demand):
            await cancel_and_wait(task)

    async def _loop(self) -> None:
        # The first walk comes one tick after start: a process starting (or restarting in a
        # crash loop) does not run jobs before it has served.
        while True:
            await asyncio.sleep(self._config.tick_seconds)
            try:
                await self.tick()
            except EngramError as error:
                log.warning("maintenance tick failed", extra={"error": error.message})
            except Exception:  # noqa: BLE001 - the schedule outlives one bad walk
                log.exception("maintenance tick failed")

    async def tick(self) -> list[JobRun]:
        """One walk over every space: runs every scheduled job that is due (one at a time)
        and returns the runs this worker made."""
        done: list[JobRun] = []
        if not self._jobs:
            return done
        token = ""
        while True:
            spaces, token = await self._spaces.space_page(
                page_token=token, limit=self._config.space_page
            )
            if not spaces:
                break
            ids = [space.id for space in spaces]
            settings = await self._settings.get_many(ids)
            last = await self._runs.last_runs(ids)
            for space in spaces:
                space_settings = settings.get(space.id, SpaceSettings())
                for job in self._jobs.values():
                    if not job.scheduled(space_settings):
                        continue
                    if not self._due(job, space_settings, last.get((job.name, space.id))):
                        continue
                    run = await self._run(job, space, space_settings, on_demand=False)
                    if run is not None:
                        done.append(run)
            if not token:
                break
        retention = timedelta(days=self._config.run_retention_days)
        await self._runs.prune(self._clock() - retention, limit=1000)
        return done

    def _due(self, job: Job, settings: SpaceSettings, last: LastRuns | None) -> bool:
        return is_due(
            self._clock(),
            job.interval(settings),
            last or LastRuns(),
            timedelta(seconds=self._config.retry_after_failure_seconds),
        )

    # --- on demand ---------------------------------------------------------------------------

    async def run_now(self, job_name: str, space: SpaceRef) -> JobRun:
        """Runs the job on the space now (RunJob), whatever its schedule; Conflict (ABORTED)
        while a run of it holds the lease, RateLimited (RESOURCE_EXHAUSTED) while this worker
        already runs `max_on_demand` of them. A caller that goes away does not stop the run:
        it is recorded as usual (the worker's stop does stop it)."""
        job = self.job(job_name)
        if len(self._on_demand) >= self._config.max_on_demand:
            raise RateLimited(
                f"this worker already runs {self._config.max_on_demand} jobs on demand; "
                "retry when one has finished",
                retry_after_seconds=10,
            )
        settings = await self.settings_of(space.id)
        task = asyncio.create_task(
            self._run(job, space, settings, on_demand=True), name=f"maintenance-{job.name}"
        )
        self._on_demand.add(task)
        task.add_done_callback(self._on_demand.discard)
        run = await asyncio.shield(task)
        if run is None:
            held = await self._leases.current(lease_key(job.name, space.id))
            by = f" by {held.holder.split('#')[0]}" if held is not None else ""
            raise Conflict(
                f"job {job.name!r} is already running on {space.describe()}{by}; "
                "retry when it has finished (engram jobs --space ... lists its runs)",
                metadata={"job": job.name, "space_id": space.id},
            )
        return run

    # --- one run -----------------------------------------------------------------------------

    async def _run(
        self, job: Job, space: SpaceRef, settings: SpaceSettings, *, on_demand: bool
    ) -> JobRun | None:
        """Takes the lease and runs; None when another run holds the lease (or, for the
        schedule, when another worker ran the job meanwhile)."""
        ttl = timedelta(seconds=self._config.lease_seconds)
        key = lease_key(job.name, space.id)
        lease = await self._leases.acquire(key, f"{self.name}#{uuid.uuid4().hex}", ttl)
        if lease is None:
            return None
        try:
            if not on_demand:
                last = (await self._runs.last_runs([space.id])).get((job.name, space.id))
                if not self._due(job, settings, last):
                    return None
            started = self._clock()
            await self._runs.abandon(
                job.name, space.id, started, "the worker running it stopped before it finished"
            )
            run = JobRun(
                run_id=uuid.uuid4().hex,
                job=job.name,
                space=space,
                started_at=started,
                outcome=JobOutcome.RUNNING,
                worker=self.name,
                on_demand=on_demand,
            )
            await self._runs.start(run)
            return await self._execute(job, space, settings, run, lease)
        finally:
            with contextlib.suppress(EngramError):
                await self._leases.release(lease)

    async def _execute(
        self, job: Job, space: SpaceRef, settings: SpaceSettings, run: JobRun, lease: Lease
    ) -> JobRun:
        began = time.monotonic()
        work = asyncio.create_task(job.run(space, settings), name=f"maintenance-{job.name}")
        keeper = asyncio.create_task(self._keep(lease, work), name="maintenance-lease")
        report: JobReport | None = None
        message = ""
        try:
            async with asyncio.timeout(self._config.run_timeout_seconds):
                report = await work
        except TimeoutError:
            message = (
                f"ran longer than {self._config.run_timeout_seconds:g} s "
                "(ENGRAM_MAINTENANCE_RUN_TIMEOUT_SECONDS) and was stopped"
            )
        except asyncio.CancelledError:
            if keeper.done() and not keeper.cancelled() and keeper.result() is False:
                message = (
                    "lost its lease (not renewed in time; another worker may run it) "
                    "and was stopped"
                )
            else:
                await self._record(run, None, "the worker stopped during the run", began)
                raise
        except EngramError as error:
            message = error.message
        except Exception as error:  # noqa: BLE001 - a job's failure is recorded, never fatal
            log.exception("maintenance job failed", extra={"job": job.name, "space": space.id})
            message = f"{type(error).__name__}: {error}"[:500]
        finally:
            await cancel_and_wait(keeper)
        return await self._record(run, report, message, began)

    async def _keep(self, lease: Lease, work: asyncio.Task[JobReport]) -> bool:
        """Renews the lease a few times per lease period; cancels the run when the lease is
        lost (another worker may take it then). Returns False when it was lost."""
        ttl = timedelta(seconds=self._config.lease_seconds)
        while True:
            await asyncio.sleep(self._config.lease_seconds / 3)
            try:
                renewed = await self._leases.renew(lease, ttl)
            except EngramError:
                renewed = None if self._clock() >= lease.expires_at else lease
            if renewed is None:
                work.cancel()
                return False
            lease = renewed

    async def _record(
        self, run: JobRun, report: JobReport | None, failure: str, began: float
    ) -> JobRun:
        seconds = time.monotonic() - began
        outcome = JobOutcome.SUCCEEDED if report is not None else JobOutcome.FAILED
        finished = replace(
            run,
            outcome=outcome,
            finished_at=self._clock(),
            counts=dict(report.counts) if report is not None else {},
            message=(report.message if report is not None else failure)[:MAX_MESSAGE_CHARS],
            details=(
                tuple(line[:MAX_DETAIL_CHARS] for line in report.details[:MAX_RUN_DETAILS])
                if report is not None
                else ()
            ),
        )
        await self._runs.finish(finished)
        RUNS.labels(run.job, outcome.value).inc()
        RUN_SECONDS.labels(run.job).observe(seconds)
        if outcome is JobOutcome.SUCCEEDED:
            LAST_SUCCESS.labels(run.job).set(time.time())
        else:
            FAILURES.labels(run.job).inc()
            log.warning(
                "maintenance job failed",
                extra={"job": run.job, "space": run.space.id, "error": failure},
            )
        log.info(
            "maintenance job ran",
            extra={
                "job": run.job,
                "space": run.space.id,
                "outcome": outcome.value,
                "seconds": round(seconds, 3),
                "on_demand": run.on_demand,
            },
        )
        return finished
