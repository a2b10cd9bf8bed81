"""Where the indexer reads documents: the current state of one document, and every document
of a space (or of all) for backfills.

The worker never trusts an event's payload for content: it reads the document as it is now,
which is what makes duplicate, stale and out-of-order events harmless. `engram dev` reads the
embedded repository directly; `engram serve indexer` reads and lists through StorageService
over gRPC as a service principal (storage's database is storage's alone).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Protocol

import grpc

from engram.client import Document, EngramClient
from engram.domain.documents import StoredDocument
from engram.domain.errors import NotFound
from engram.domain.spaces import SpaceRef, parse_space_id

# ListDocuments page size for a space backfill through StorageService.
LIST_PAGE = 1000
# What a document without a recorded time reports (as an unset protobuf Timestamp).
EPOCH = datetime.fromtimestamp(0, UTC)


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
    """Reads a DocumentRepository directly (SQLite in `engram dev`, one process)."""

    def __init__(self, repository: PathCatalog) -> None:
        self._repository = repository

    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        return await self._repository.get(space.id, path)

    async def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        async for found, path in self._repository.iter_paths(space_id):
            yield parse_space_id(found), path


class StorageClientDocumentSource:
    """Reads documents through StorageService (engram.client) with a service-principal
    token: one document by ReadDocument, one space by ListDocuments, every space by
    ListAllDocuments. Nothing of storage's database is read here."""

    def __init__(
        self, channel: grpc.aio.Channel, token: str, *, timeout_seconds: float = 10.0
    ) -> None:
        self._client = EngramClient(channel=channel, token=token, timeout=timeout_seconds)

    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        try:
            document = await self._client.read_document(path, space=space)
        except NotFound:
            return None
        return stored_document(document)

    async def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        if space_id is None:
            async for found, path in self._client.iter_all_documents(page_size=LIST_PAGE):
                yield parse_space_id(found), path
            return
        space = parse_space_id(space_id)
        entries = self._client.iter_documents(recursive=True, page_size=LIST_PAGE, space=space)
        async for entry in entries:
            if not entry.is_dir:
                yield space, entry.path


def stored_document(document: Document) -> StoredDocument:
    return StoredDocument(
        space=parse_space_id(document.space_id),
        path=document.path,
        content=document.content,
        sha256=document.sha256,
        size_bytes=document.size_bytes,
        word_count=document.word_count,
        version=document.version,
        document_id=document.document_id,
        created_at=document.created_at or EPOCH,
        updated_at=document.updated_at or EPOCH,
        updated_by=document.updated_by,
    )
