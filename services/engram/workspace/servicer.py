"""WorkspaceService servicer: protobuf in, domain call, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from engram.runtime.context import current_principal
from engram.v1 import workspace_pb2, workspace_pb2_grpc
from engram.wire import requested_space
from engram.workspace import mapping
from engram.workspace.service import DateRead, WorkspaceService

Context = grpc.aio.ServicerContext[Any, Any]


class WorkspaceServicer(workspace_pb2_grpc.WorkspaceServiceServicer):
    def __init__(self, service: WorkspaceService) -> None:
        self._service = service

    async def MemoryWrite(
        self, request: workspace_pb2.MemoryWriteRequest, context: Context
    ) -> workspace_pb2.MemoryWriteResponse:
        outcome = await self._service.write(current_principal(), mapping.write_request(request))
        return mapping.write_response(outcome)

    async def MemoryRead(
        self, request: workspace_pb2.MemoryReadRequest, context: Context
    ) -> workspace_pb2.MemoryReadResponse:
        document = await self._service.read(
            current_principal(),
            requested_space(request.space),
            request.path,
            by_date=DateRead(request.date, request.time_zone, request.session),
        )
        return mapping.read_response(document)

    async def MemoryTree(
        self, request: workspace_pb2.MemoryTreeRequest, context: Context
    ) -> workspace_pb2.MemoryTreeResponse:
        nodes = await self._service.tree(
            current_principal(), requested_space(request.space), request.path, request.depth
        )
        return workspace_pb2.MemoryTreeResponse(nodes=[mapping.tree_node(n) for n in nodes])

    async def MemorySearch(
        self, request: workspace_pb2.MemorySearchRequest, context: Context
    ) -> workspace_pb2.MemorySearchResponse:
        found = await self._service.search(
            current_principal(),
            requested_space(request.space),
            request.query,
            request.limit,
            wait=mapping.position_wait(request, context.time_remaining()),
            min_relevance=(request.min_relevance if request.HasField("min_relevance") else None),
        )
        return mapping.search_response(request.query, found)

    async def AppendDailyLog(
        self, request: workspace_pb2.AppendDailyLogRequest, context: Context
    ) -> workspace_pb2.AppendDailyLogResponse:
        outcome = await self._service.append_daily_log(
            current_principal(),
            requested_space(request.space),
            request.entry,
            time_zone=request.time_zone,
            session=request.session,
        )
        return mapping.append_response(outcome)

    async def CompleteBootstrap(
        self, request: workspace_pb2.CompleteBootstrapRequest, context: Context
    ) -> workspace_pb2.CompleteBootstrapResponse:
        archived = await self._service.complete_bootstrap(
            current_principal(), requested_space(request.space)
        )
        return workspace_pb2.CompleteBootstrapResponse(archived_path=archived)

    async def GetSystemPrompt(
        self, request: workspace_pb2.GetSystemPromptRequest, context: Context
    ) -> workspace_pb2.GetSystemPromptResponse:
        prompt = await self._service.system_prompt(
            current_principal(),
            requested_space(request.space),
            group_context=request.group_context,
            time_zone=request.time_zone,
            layout=mapping.PROMPT_LAYOUTS.get(request.layout),
        )
        return mapping.prompt_response(prompt)

    async def SeedWorkspace(
        self, request: workspace_pb2.SeedWorkspaceRequest, context: Context
    ) -> workspace_pb2.SeedWorkspaceResponse:
        seeded = await self._service.seed(current_principal(), requested_space(request.space))
        return workspace_pb2.SeedWorkspaceResponse(
            created_paths=seeded.created, existing_paths=seeded.existing
        )
