"""The workspace's ports over gRPC (`engram serve workspace`): StorageService and
SearchService called through engram.client as the workspace's service principal
(ENGRAM_SERVICE_TOKEN) for the space the workspace service already authorized for its
caller. Failed calls come back as the same domain errors."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc

from engram.client import EngramClient
from engram.domain.errors import DocumentNotFound
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
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
# What a document without a recorded change time reports (as an unset protobuf Timestamp).
EPOCH = datetime.fromtimestamp(0, UTC)


class _Remote:
    def __init__(self, channel: grpc.aio.Channel, token: str, timeout: float) -> None:
        self._client = EngramClient(channel=channel, token=token, timeout=timeout)
        self._timeout = timeout


class RemoteDocuments(_Remote):
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 10.0) -> None:
        super().__init__(channel, token, timeout)

    async def get(
        self, principal: Principal, space: SpaceRef, path: str
    ) -> WorkspaceDocument | None:
        try:
            document = await self._client.read_document(path, space=space)
        except DocumentNotFound:
            return None
        return WorkspaceDocument(
            path=document.path,
            content=document.content,
            sha256=document.sha256,
            size_bytes=document.size_bytes,
            version=document.version,
            word_count=document.word_count,
            updated_at=document.updated_at or EPOCH,
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
        written = await self._client.write_document(
            path,
            content,
            append=append,
            expected_sha256=expected_sha256,
            create_only=create_only,
            append_as_line=as_line,
            prefix_if_created=created_prefix,
            space=space,
        )
        document = written.document
        return StoredWrite(
            path=document.path,
            sha256=document.sha256,
            size_bytes=document.size_bytes,
            version=document.version,
            created=written.created,
            bytes_delta=written.bytes_delta,
            position=written.position,
        )

    async def delete(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str
    ) -> None:
        await self._client.delete_document(path, expected_sha256=expected_sha256, space=space)

    async def list_paths(
        self, principal: Principal, space: SpaceRef, directory: str, *, limit: int
    ) -> list[str]:
        async def page(token: str) -> PathPage:
            found = await self._client.list_documents(
                directory, recursive=True, page_size=LIST_PAGE_SIZE, page_token=token, space=space
            )
            return [e.path for e in found.entries if not e.is_dir], found.next_page_token

        return await collect_paths(page, limit)


class RemoteSearch(_Remote):
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 10.0) -> None:
        super().__init__(channel, token, timeout)

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
        client = self._client
        if wait.positions and wait.deadline_seconds is not None:
            # Searching for positions may take up to the caller's own deadline.
            client = client.with_options(timeout=max(self._timeout, wait.deadline_seconds))
        found = await client.search(
            query,
            spaces=[space],
            limit=limit,
            mode="hybrid",
            min_positions=wait.positions,
            max_wait_ms=_wait_ms(wait.max_wait_seconds),
            min_relevance=min_relevance,
        )
        return MemoryHits(
            hits=[
                MemoryHit(
                    path=hit.path,
                    content=hit.content,
                    score=hit.score,
                    document_id=hit.document_id,
                    chunk_id=hit.chunk_id,
                    is_hybrid_match=hit.is_hybrid_match,
                    relevance=hit.relevance,
                )
                for hit in found.results
            ],
            degraded=found.degraded,
            degraded_reasons=list(found.degraded_reasons),
            keyword_positions_behind=found.keyword_positions_behind,
            vector_positions_behind=found.vector_positions_behind,
            waited_seconds=found.waited_ms / 1000,
        )


def _wait_ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, round(seconds * 1000))
