"""SearchService servicer: protobuf in, domain call, protobuf out. No rules live here."""

from __future__ import annotations

from typing import Any

import grpc

from engram.runtime.context import current_principal
from engram.search import mapping
from engram.search.service import SearchService
from engram.v1 import search_pb2, search_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, service: SearchService) -> None:
        self._service = service

    async def Search(
        self, request: search_pb2.SearchRequest, context: Context
    ) -> search_pb2.SearchResponse:
        query = mapping.search_query(request, deadline_seconds=context.time_remaining())
        outcome = await self._service.search(current_principal(), query)
        return mapping.search_response(outcome)
