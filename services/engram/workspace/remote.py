"""The workspace's ports over gRPC (`engram serve workspace`): StorageService and
SearchService called as the workspace's service principal (ENGRAM_SERVICE_TOKEN) for the
space the workspace service already authorized for its caller. Failed calls come back as
the same domain errors (engram.runtime.errors.remote_errors)."""

from __future__ import annotations

import grpc

from engram.domain.errors import DocumentNotFound
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.runtime.errors import remote_errors
from engram.v1 import search_pb2, search_pb2_grpc, storage_pb2, storage_pb2_grpc
from engram.wire import from_timestamp, position_from_proto, position_to_proto, space_to_proto
from engram.workspace.ports import (
    NO_WAIT,
    MemoryHit,
    MemoryHits,
    PathPage,
    PositionWait,
    StoredWrite,
    WorkspaceDocument,
    collect_paths,
)

LIST_PAGE_SIZE = 1000


class _Remote:
    def __init__(self, token: str, timeout: float) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout


class RemoteDocuments(_Remote):
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 10.0) -> None:
        super().__init__(token, timeout)
        self._stub = storage_pb2_grpc.StorageServiceStub(channel)

    async def get(
        self, principal: Principal, space: SpaceRef, path: str
    ) -> WorkspaceDocument | None:
        request = storage_pb2.ReadDocumentRequest(space=space_to_proto(space), path=path)
        try:
            with remote_errors("StorageService.ReadDocument"):
                response = await self._stub.ReadDocument(
                    request, metadata=self._metadata, timeout=self._timeout
                )
        except DocumentNotFound:
            return None
        document = response.document
        return WorkspaceDocument(
            path=document.path,
            content=document.content,
            sha256=document.sha256,
            size_bytes=document.size_bytes,
            version=document.version,
            word_count=document.word_count,
            updated_at=from_timestamp(document.updated_at),
        )

    async def write(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        content: str,
        *,
        append: bool,
        expected_sha256: str = "",
        create_only: bool = False,
        as_line: bool = False,
        created_prefix: str = "",
    ) -> StoredWrite:
        request = storage_pb2.WriteDocumentRequest(
            space=space_to_proto(space),
            path=path,
            content=content,
            mode=storage_pb2.WRITE_MODE_APPEND if append else storage_pb2.WRITE_MODE_REPLACE,
            expected_sha256=expected_sha256,
            create_only=create_only,
            append_as_line=as_line,
            prefix_if_created=created_prefix,
        )
        with remote_errors("StorageService.WriteDocument"):
            response = await self._stub.WriteDocument(
                request, metadata=self._metadata, timeout=self._timeout
            )
        document = response.document
        return StoredWrite(
            path=document.path,
            sha256=document.sha256,
            size_bytes=document.size_bytes,
            version=document.version,
            created=response.created,
            bytes_delta=response.bytes_delta,
            position=(
                position_from_proto(response.position) if response.HasField("position") else None
            ),
        )

    async def delete(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str
    ) -> None:
        request = storage_pb2.DeleteDocumentRequest(
            space=space_to_proto(space), path=path, expected_sha256=expected_sha256
        )
        with remote_errors("StorageService.DeleteDocument"):
            await self._stub.DeleteDocument(request, metadata=self._metadata, timeout=self._timeout)

    async def list_paths(
        self, principal: Principal, space: SpaceRef, directory: str, *, limit: int
    ) -> list[str]:
        async def page(token: str) -> PathPage:
            request = storage_pb2.ListDocumentsRequest(
                space=space_to_proto(space),
                dir=directory,
                recursive=True,
                page_size=LIST_PAGE_SIZE,
                page_token=token,
            )
            with remote_errors("StorageService.ListDocuments"):
                response = await self._stub.ListDocuments(
                    request, metadata=self._metadata, timeout=self._timeout
                )
            return [e.path for e in response.entries if not e.is_dir], response.next_page_token

        return await collect_paths(page, limit)


class RemoteSearch(_Remote):
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 10.0) -> None:
        super().__init__(token, timeout)
        self._stub = search_pb2_grpc.SearchServiceStub(channel)

    async def search(
        self,
        principal: Principal,
        space: SpaceRef,
        query: str,
        *,
        limit: int,
        wait: PositionWait = NO_WAIT,
        min_relevance: float = 0.0,
    ) -> MemoryHits:
        request = search_pb2.SearchRequest(
            spaces=[space_to_proto(space)],
            query=query,
            limit=limit,
            mode=search_pb2.SEARCH_MODE_HYBRID,
            min_relevance=min_relevance,
            min_positions=[position_to_proto(p) for p in wait.positions],
            max_wait_ms=_wait_ms(wait.max_wait_seconds),
        )
        timeout = self._timeout
        if wait.positions and wait.deadline_seconds is not None:
            # Searching for positions may take up to the caller's own deadline.
            timeout = max(timeout, wait.deadline_seconds)
        with remote_errors("SearchService.Search"):
            response = await self._stub.Search(request, metadata=self._metadata, timeout=timeout)
        return MemoryHits(
            hits=[
                MemoryHit(
                    path=result.path,
                    content=result.content,
                    score=result.score,
                    document_id=result.document_id,
                    chunk_id=result.chunk_id,
                    is_hybrid_match=result.is_hybrid_match,
                    relevance=result.relevance,
                )
                for result in response.results
            ],
            degraded=response.degraded,
            degraded_reasons=list(response.degraded_reasons),
            keyword_positions_behind=response.keyword_positions_behind,
            vector_positions_behind=response.vector_positions_behind,
            waited_seconds=response.waited_ms / 1000,
        )


def _wait_ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, round(seconds * 1000))
