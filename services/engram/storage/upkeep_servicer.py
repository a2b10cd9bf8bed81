"""StorageService's upkeep RPCs (service principals only): protobuf in, the upkeep room's
call, protobuf out. Mixed into StorageServicer."""

from __future__ import annotations

from typing import Any

import grpc

from engram.runtime.context import current_principal
from engram.storage import mapping
from engram.storage.service import StorageService
from engram.v1 import storage_pb2
from engram.wire import requested_space, space_to_proto

Context = grpc.aio.ServicerContext[Any, Any]


class UpkeepRpcs:
    _service: StorageService

    async def GetStoredUsage(
        self, request: storage_pb2.GetStoredUsageRequest, context: Context
    ) -> storage_pb2.GetStoredUsageResponse:
        usage = await self._service.upkeep.stored_usage(current_principal(), request.space_id)
        return storage_pb2.GetStoredUsageResponse(
            used_bytes=usage.used_bytes, document_count=usage.document_count
        )

    async def SumStoredUsage(
        self, request: storage_pb2.SumStoredUsageRequest, context: Context
    ) -> storage_pb2.SumStoredUsageResponse:
        sums = await self._service.upkeep.sum_usage(
            current_principal(),
            request.tenant,
            global_=getattr(request, "global"),  # a Python keyword
        )
        return storage_pb2.SumStoredUsageResponse(
            spaces=[
                storage_pb2.StoredSpaceUsage(space_id=space_id, used_bytes=used)
                for space_id, used in sorted(sums.items())
            ]
        )

    async def PruneVersions(
        self, request: storage_pb2.PruneVersionsRequest, context: Context
    ) -> storage_pb2.PruneVersionsResponse:
        pruned = await self._service.upkeep.prune_versions(
            current_principal(), requested_space(request.space)
        )
        return storage_pb2.PruneVersionsResponse(versions_pruned=pruned)

    async def ListAllSpaces(
        self, request: storage_pb2.ListAllSpacesRequest, context: Context
    ) -> storage_pb2.ListAllSpacesResponse:
        page = await self._service.upkeep.all_spaces(
            current_principal(), page_size=request.page_size, page_token=request.page_token
        )
        return storage_pb2.ListAllSpacesResponse(
            spaces=[space_to_proto(space) for space in page.items],
            next_page_token=page.next_page_token,
        )

    async def ScanDocuments(
        self, request: storage_pb2.ScanDocumentsRequest, context: Context
    ) -> storage_pb2.ScanDocumentsResponse:
        page = await self._service.upkeep.scan_documents(
            current_principal(),
            requested_space(request.space),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return storage_pb2.ScanDocumentsResponse(
            documents=[mapping.document_to_proto(d, with_content=True) for d in page.items],
            next_page_token=page.next_page_token,
        )
