"""MaintenanceService calls: job runs, on-demand runs, each space's maintenance settings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime

import grpc

from engram.client import mapping
from engram.client.base import AnySpace, ClientBase, Page, pages
from engram.client.models import Space
from engram.domain.errors import InvalidArgument
from engram.v1 import maintenance_pb2, maintenance_pb2_grpc

OUTCOMES = {
    maintenance_pb2.JOB_OUTCOME_RUNNING: "running",
    maintenance_pb2.JOB_OUTCOME_SUCCEEDED: "succeeded",
    maintenance_pb2.JOB_OUTCOME_FAILED: "failed",
}
LOG_RETENTIONS = {
    "off": maintenance_pb2.LOG_RETENTION_OFF,
    "archive": maintenance_pb2.LOG_RETENTION_ARCHIVE,
    "delete": maintenance_pb2.LOG_RETENTION_DELETE,
}
LOG_RETENTION_NAMES = {number: name for name, number in LOG_RETENTIONS.items()}


@dataclass(frozen=True, slots=True)
class JobRun:
    run_id: str
    job: str
    space: Space
    space_id: str
    started_at: datetime | None
    # None while the run is under way.
    finished_at: datetime | None
    # running, succeeded or failed.
    outcome: str
    counts: Mapping[str, int]
    message: str
    details: tuple[str, ...]
    worker: str
    on_demand: bool


@dataclass(frozen=True, slots=True)
class SpaceMaintenance:
    """What the maintenance worker does to one space (0 = the server's default)."""

    dream_enabled: bool = False
    # off, archive or delete.
    log_retention: str = "off"
    max_daily_logs: int = 0
    log_retention_days: int = 0
    stale_after_days: int = 0


def _maintenance(
    channel: grpc.aio.Channel,
) -> maintenance_pb2_grpc.MaintenanceServiceAsyncStub:
    return maintenance_pb2_grpc.MaintenanceServiceStub(channel)


class MaintenanceCalls(ClientBase):
    """MaintenanceService."""

    async def list_job_runs(
        self,
        *,
        job: str = "",
        all_spaces: bool = False,
        page_size: int = 0,
        page_token: str = "",
        space: AnySpace | None = None,
    ) -> Page[JobRun]:
        """One page of job runs, newest first: the space's, or with `all_spaces` every
        space's (platform admin); `job` keeps one job's."""
        request = maintenance_pb2.ListJobRunsRequest(
            job=job, page_size=page_size, page_token=page_token
        )
        if not all_spaces:
            request.space.CopyFrom(self._space(space))
        response = await self._call(
            "MaintenanceService.ListJobRuns",
            self._stub(_maintenance).ListJobRuns,
            request,
            idempotent=True,
        )
        return Page(tuple(job_run(run) for run in response.runs), response.next_page_token)

    async def iter_job_runs(
        self,
        *,
        job: str = "",
        all_spaces: bool = False,
        page_size: int = 0,
        space: AnySpace | None = None,
    ) -> AsyncIterator[JobRun]:
        """Every run of list_job_runs, page after page."""

        async def page(token: str) -> Page[JobRun]:
            return await self.list_job_runs(
                job=job, all_spaces=all_spaces, page_size=page_size, page_token=token, space=space
            )

        async for run in pages(page):
            yield run

    async def run_job(self, job: str, *, space: AnySpace | None = None) -> JobRun:
        """Runs one job on the space now and returns its run (Conflict when a run is under
        way elsewhere). Never retried."""
        request = maintenance_pb2.RunJobRequest(job=job, space=self._space(space))
        response = await self._call(
            "MaintenanceService.RunJob",
            self._stub(_maintenance).RunJob,
            request,
            idempotent=False,
        )
        return job_run(response.run)

    async def get_space_maintenance(self, *, space: AnySpace | None = None) -> SpaceMaintenance:
        """The space's maintenance settings (the defaults when none were set)."""
        request = maintenance_pb2.GetSpaceMaintenanceRequest(space=self._space(space))
        response = await self._call(
            "MaintenanceService.GetSpaceMaintenance",
            self._stub(_maintenance).GetSpaceMaintenance,
            request,
            idempotent=True,
        )
        return settings_from_proto(response.settings)

    async def set_space_maintenance(
        self, settings: SpaceMaintenance, *, space: AnySpace | None = None
    ) -> SpaceMaintenance:
        """Replaces the space's maintenance settings (tenant admin); returns them. Retried on
        UNAVAILABLE: setting the same settings twice is setting them once."""
        request = maintenance_pb2.SetSpaceMaintenanceRequest(
            space=self._space(space), settings=settings_to_proto(settings)
        )
        response = await self._call(
            "MaintenanceService.SetSpaceMaintenance",
            self._stub(_maintenance).SetSpaceMaintenance,
            request,
            idempotent=True,
        )
        return settings_from_proto(response.settings)


def job_run(message: maintenance_pb2.JobRun) -> JobRun:
    return JobRun(
        run_id=message.run_id,
        job=message.job,
        space=mapping.space_from_proto(message.space),
        space_id=message.space_id,
        started_at=mapping.optional_time(message, "started_at"),
        finished_at=mapping.optional_time(message, "finished_at"),
        outcome=OUTCOMES.get(message.outcome, "unspecified"),
        counts=dict(message.counts),
        message=message.message,
        details=tuple(message.details),
        worker=message.worker,
        on_demand=message.on_demand,
    )


def settings_from_proto(message: maintenance_pb2.SpaceMaintenance) -> SpaceMaintenance:
    return SpaceMaintenance(
        dream_enabled=message.dream_enabled,
        log_retention=LOG_RETENTION_NAMES.get(message.log_retention, "off"),
        max_daily_logs=message.max_daily_logs,
        log_retention_days=message.log_retention_days,
        stale_after_days=message.stale_after_days,
    )


def settings_to_proto(wanted: SpaceMaintenance) -> maintenance_pb2.SpaceMaintenance:
    retention = LOG_RETENTIONS.get(wanted.log_retention)
    if retention is None:
        raise InvalidArgument(
            f"log_retention {wanted.log_retention!r} is not one of {', '.join(LOG_RETENTIONS)}",
            field="log_retention",
        )
    return maintenance_pb2.SpaceMaintenance(
        dream_enabled=wanted.dream_enabled,
        log_retention=retention,
        max_daily_logs=wanted.max_daily_logs,
        log_retention_days=wanted.log_retention_days,
        stale_after_days=wanted.stale_after_days,
    )
