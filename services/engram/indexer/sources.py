"""Where the indexer reads documents: the current state of one document, and every document
of a space (or of all) for backfills.

The worker never trusts an event's payload for content: it reads the document as it is now,
which is what makes duplicate, stale and out-of-order events harmless. `engram dev` reads the
embedded repository directly; `engram serve indexer` reads through StorageService over gRPC
as a service principal, and lists documents for backfills from the MongoDB catalog.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from engram.domain.documents import StoredDocument
from engram.domain.errors import InvalidArgument, NotFound
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.runtime.errors import remote_errors
from engram.v1 import document_pb2, storage_pb2, storage_pb2_grpc
from engram.wire import from_timestamp, space_to_proto

# ListDocuments page size for a space backfill through StorageService.
LIST_PAGE = 1000


class DocumentSource(Protocol):
    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        """The document as stored now, None if there is none."""
        ...

    def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        """(space, path) of every live document of `space_id` (None = every space)."""
        ...


class PathCatalog(Protocol):
    """What `RepositoryDocumentSource` needs of a DocumentRepository adapter."""

    async def get(self, space_id: str, path: str) -> StoredDocument | None: ...

    def iter_paths(
        self, space_id: str | None = None, *, page_size: int = 1000
    ) -> AsyncIterator[tuple[str, str]]: ...


class RepositoryDocumentSource:
    """Reads a DocumentRepository (SQLite in `engram dev`, MongoDB for production listing)."""

    def __init__(self, repository: PathCatalog) -> None:
        self._repository = repository

    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        return await self._repository.get(space.id, path)

    async def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        async for found, path in self._repository.iter_paths(space_id):
            yield parse_space_id(found), path


class StorageClientDocumentSource:
    """Reads documents through StorageService.ReadDocument with a service-principal token.

    Listing every space has no RPC; it comes from `catalog` (the MongoDB repository). A
    single space without a catalog is listed through ListDocuments.
    """

    def __init__(
        self,
        stub: storage_pb2_grpc.StorageServiceAsyncStub,
        token: str,
        *,
        catalog: DocumentSource | None = None,
        timeout_seconds: float = 10.0,
    ) -> None:
        self._stub = stub
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._catalog = catalog
        self._timeout = timeout_seconds

    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        request = storage_pb2.ReadDocumentRequest(space=space_to_proto(space), path=path)
        try:
            with remote_errors("StorageService.ReadDocument"):
                response = await self._stub.ReadDocument(
                    request, metadata=self._metadata, timeout=self._timeout
                )
        except NotFound:
            return None
        return document_from_proto(response.document)

    async def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        if self._catalog is not None:
            async for item in self._catalog.documents(space_id):
                yield item
            return
        if space_id is None:
            raise InvalidArgument(
                "listing every space needs the document catalog (ENGRAM_MONGO_URI)", field="all"
            )
        space = parse_space_id(space_id)
        token = ""
        while True:
            request = storage_pb2.ListDocumentsRequest(
                space=space_to_proto(space), recursive=True, page_size=LIST_PAGE, page_token=token
            )
            with remote_errors("StorageService.ListDocuments"):
                response = await self._stub.ListDocuments(
                    request, metadata=self._metadata, timeout=self._timeout
                )
            for entry in response.entries:
                if not entry.is_dir:
                    yield space, entry.path
            token = response.next_page_token
            if not token:
                return


def document_from_proto(message: document_pb2.Document) -> StoredDocument:
    return StoredDocument(
        space=parse_space_id(message.space_id),
        path=message.path,
        content=message.content,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        word_count=message.word_count,
        version=message.version,
        document_id=message.document_id,
        created_at=from_timestamp(message.created_at),
        updated_at=from_timestamp(message.updated_at),
        updated_by=message.updated_by,
    )
