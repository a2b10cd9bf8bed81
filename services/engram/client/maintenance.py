"""MaintenanceService calls: job runs, on-demand runs, each space's maintenance settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from engram.client.base import AnySpace, ClientBase, pages
from engram.v1 import maintenance_pb2, maintenance_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.maintenance import JobRun, SpaceMaintenance
    from engram.client.results.page import Page


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
        from engram.client.results.maintenance import job_run
        from engram.client.results.page import Page

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
        from engram.client.results.maintenance import job_run

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
        from engram.client.results.maintenance import settings_from_proto

        return settings_from_proto(response.settings)

    async def set_space_maintenance(
        self, settings: SpaceMaintenance, *, space: AnySpace | None = None
    ) -> SpaceMaintenance:
        """Replaces the space's maintenance settings (tenant admin); returns them. Retried on
        UNAVAILABLE: setting the same settings twice is setting them once."""
        from engram.client.results.maintenance import settings_from_proto, settings_to_proto

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
