"""The workspace's ports over the StorageService and SearchService of this process
(`engram dev`): the caller's principal is passed on, so storage records who wrote."""

from __future__ import annotations

from engram.domain.documents import StoredDocument
from engram.domain.errors import DocumentNotFound
from engram.domain.positions import IndexPosition
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.search.service import SearchMode, SearchQuery, SearchService
from engram.storage.service import Appending, StorageService, WriteMode
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


def _document(stored: StoredDocument) -> WorkspaceDocument:
    return WorkspaceDocument(
        path=stored.path,
        content=stored.content,
        sha256=stored.sha256,
        size_bytes=stored.size_bytes,
        version=stored.version,
        word_count=stored.word_count,
        updated_at=stored.updated_at,
    )


class LocalDocuments:
    def __init__(self, storage: StorageService) -> None:
        self._storage = storage

    async def get(
        self, principal: Principal, space: SpaceRef, path: str
    ) -> WorkspaceDocument | None:
        try:
            stored, _ = await self._storage.read(principal, space, path)
        except DocumentNotFound:
            return None
        return _document(stored)

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
        result = await self._storage.write(
            principal,
            space,
            path,
            content,
            mode=WriteMode.APPEND if append else WriteMode.REPLACE,
            expected_sha256=expected_sha256,
            create_only=create_only,
            appending=Appending(as_line=as_line, created_prefix=created_prefix),
        )
        stored = result.document
        return StoredWrite(
            path=stored.path,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            version=stored.version,
            created=result.created,
            bytes_delta=result.bytes_delta,
            position=IndexPosition(
                space_id=stored.space_id,
                path=stored.path,
                document_id=stored.document_id,
                version=stored.version,
            ),
        )

    async def delete(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str
    ) -> None:
        await self._storage.delete(principal, space, path, expected_sha256=expected_sha256)

    async def list_paths(
        self, principal: Principal, space: SpaceRef, directory: str, *, limit: int
    ) -> list[str]:
        async def page(token: str) -> PathPage:
            listed = await self._storage.list_directory(
                principal,
                space,
                directory,
                recursive=True,
                page_size=LIST_PAGE_SIZE,
                page_token=token,
            )
            return [i.path for i in listed.items if not i.is_dir], listed.next_page_token

        return await collect_paths(page, limit)


class LocalSearch:
    def __init__(self, search: SearchService) -> None:
        self._search = search

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
        outcome = await self._search.search(
            principal,
            SearchQuery(
                spaces=[space],
                text=query,
                limit=limit,
                mode=SearchMode.HYBRID,
                min_relevance=min_relevance,
                min_positions=wait.positions,
                max_wait_seconds=wait.max_wait_seconds,
                deadline_seconds=wait.deadline_seconds,
            ),
        )
        return MemoryHits(
            hits=[
                MemoryHit(
                    path=hit.chunk.path,
                    content=hit.chunk.content,
                    score=hit.score,
                    document_id=hit.chunk.document_id,
                    chunk_id=hit.chunk.chunk_id,
                    is_hybrid_match=hit.is_hybrid_match,
                    relevance=hit.relevance,
                )
                for hit in outcome.hits
            ],
            degraded=outcome.degraded,
            degraded_reasons=list(outcome.degraded_reasons),
            keyword_positions_behind=outcome.keyword_positions_behind,
            vector_positions_behind=outcome.vector_positions_behind,
            waited_seconds=outcome.waited_seconds,
        )
