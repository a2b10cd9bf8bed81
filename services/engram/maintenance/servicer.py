"""MaintenanceService servicer: protobuf in, domain call, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from engram.maintenance import mapping
from engram.maintenance.service import MaintenanceService
from engram.runtime.context import current_principal
from engram.v1 import maintenance_pb2, maintenance_pb2_grpc
from engram.wire import requested_space

Context = grpc.aio.ServicerContext[Any, Any]


class MaintenanceServicer(maintenance_pb2_grpc.MaintenanceServiceServicer):
    def __init__(self, service: MaintenanceService) -> None:
        self._service = service

    async def ListJobRuns(
        self, request: maintenance_pb2.ListJobRunsRequest, context: Context
    ) -> maintenance_pb2.ListJobRunsResponse:
        space = requested_space(request.space) if request.HasField("space") else None
        runs, token = await self._service.list_runs(
            current_principal(),
            space,
            job=request.job,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return maintenance_pb2.ListJobRunsResponse(
            runs=[mapping.run_to_proto(run) for run in runs], next_page_token=token
        )

    async def RunJob(
        self, request: maintenance_pb2.RunJobRequest, context: Context
    ) -> maintenance_pb2.RunJobResponse:
        run = await self._service.run_job(
            current_principal(), request.job, requested_space(request.space)
        )
        return maintenance_pb2.RunJobResponse(run=mapping.run_to_proto(run))

    async def GetSpaceMaintenance(
        self, request: maintenance_pb2.GetSpaceMaintenanceRequest, context: Context
    ) -> maintenance_pb2.GetSpaceMaintenanceResponse:
        settings = await self._service.get_settings(
            current_principal(), requested_space(request.space)
        )
        return maintenance_pb2.GetSpaceMaintenanceResponse(
            settings=mapping.settings_to_proto(settings)
        )

    async def SetSpaceMaintenance(
        self, request: maintenance_pb2.SetSpaceMaintenanceRequest, context: Context
    ) -> maintenance_pb2.SetSpaceMaintenanceResponse:
        settings = await self._service.set_settings(
            current_principal(),
            requested_space(request.space),
            mapping.settings_from_proto(request.settings),
        )
        return maintenance_pb2.SetSpaceMaintenanceResponse(
            settings=mapping.settings_to_proto(settings)
        )
