"""IndexerService servicer: protobuf in, domain call, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from engram.indexer import mapping
from engram.indexer.service import IndexerService
from engram.runtime.context import current_principal
from engram.v1 import indexer_pb2, indexer_pb2_grpc
from engram.wire import requested_space

Context = grpc.aio.ServicerContext[Any, Any]


class IndexerServicer(indexer_pb2_grpc.IndexerServiceServicer):
    def __init__(self, service: IndexerService) -> None:
        self._service = service

    async def Reindex(
        self, request: indexer_pb2.ReindexRequest, context: Context
    ) -> indexer_pb2.ReindexResponse:
        spaces = [
            requested_space(space, field=f"spaces[{i}]") for i, space in enumerate(request.spaces)
        ]
        count = await self._service.reindex(current_principal(), spaces, all_spaces=request.all)
        return indexer_pb2.ReindexResponse(documents_enqueued=count)

    async def GetIndexStatus(
        self, request: indexer_pb2.GetIndexStatusRequest, context: Context
    ) -> indexer_pb2.GetIndexStatusResponse:
        current_principal()  # any authenticated caller
        return mapping.status_to_proto(await self._service.status())

    async def GetIndexProgress(
        self, request: indexer_pb2.GetIndexProgressRequest, context: Context
    ) -> indexer_pb2.GetIndexProgressResponse:
        leg, keys = mapping.progress_request(request)
        reached = await self._service.index_progress(current_principal(), leg, keys)
        return mapping.progress_response(reached)
