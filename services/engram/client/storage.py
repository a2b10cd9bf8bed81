"""StorageService calls: documents, their versions, usage, export and import, erasure, the
spaces of a tenant and the change feed."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

import grpc

from engram.client.base import AnySpace, ClientBase, Offload, backoff, log, pages
from engram.client.mapping import position_from_proto
from engram.domain.errors import EngramError, InvalidArgument, Unavailable
from engram.domain.positions import IndexPosition
from engram.v1 import storage_pb2, storage_pb2_grpc

# Each call imports the results it builds (engram.client.results) when it first runs.
if TYPE_CHECKING:
    from engram.client.results.documents import Document, DocumentWrite
    from engram.client.results.erasure import Purge, SpaceDeletion
    from engram.client.results.feed import WatchEvent
    from engram.client.results.listing import DirectoryEntry, DocumentPage
    from engram.client.results.page import Page
    from engram.client.results.spaces import SpaceSummary
    from engram.client.results.transfer import ImportResult
    from engram.client.results.usage import Usage
    from engram.client.results.versions import DocumentVersion

# Export and import move the archive in chunks of this size.
CHUNK_BYTES = 256 * 1024
# Called with the bytes moved so far.
Progress = Callable[[int], None]
# What import_space reads: a file's path, an open binary file, bytes, or chunks.
ImportSource = str | os.PathLike[str] | BinaryIO | bytes | Iterable[bytes] | AsyncIterable[bytes]

IMPORT_STRATEGIES = {
    "skip": storage_pb2.IMPORT_STRATEGY_SKIP,
    "overwrite": storage_pb2.IMPORT_STRATEGY_OVERWRITE,
    "rename": storage_pb2.IMPORT_STRATEGY_RENAME,
}


class Deletion(int):
    """What delete_document answers: the bytes it freed (an int, as it always was), with
    the index position it left (give it to search(min_positions=...): the search then no
    longer finds the document)."""

    position: IndexPosition | None

    def __new__(cls, deleted_bytes: int, position: IndexPosition | None = None) -> Deletion:
        made = super().__new__(cls, deleted_bytes)
        made.position = position
        return made


def _storage(channel: grpc.aio.Channel) -> storage_pb2_grpc.StorageServiceAsyncStub:
    return storage_pb2_grpc.StorageServiceStub(channel)


class StorageCalls(ClientBase):
    """StorageService (`space=` overrides the client's space in each call)."""

    async def read_document(
        self, path: str, *, version: int = 0, space: AnySpace | None = None
    ) -> Document:
        """A document (or its kept `version`); NotFound if absent."""
        request = storage_pb2.ReadDocumentRequest(
            space=self._space(space), path=path, version=version
        )
        stub = self._stub(_storage)
        response = await self._call(
            "StorageService.ReadDocument", stub.ReadDocument, request, idempotent=True
        )
        from engram.client.results.documents import document

        return document(response.document)

    async def write_document(
        self,
        path: str,
        content: str,
        *,
        append: bool = False,
        expected_sha256: str = "",
        create_only: bool = False,
        append_as_line: bool = False,
        prefix_if_created: str = "",
        space: AnySpace | None = None,
    ) -> DocumentWrite:
        """Replaces (or appends to) a document; `expected_sha256` / `create_only` make the
        write conditional (EtagMismatch when the condition does not hold). An append with
        `append_as_line` starts on a line of its own, and `prefix_if_created` goes before it
        when it creates the document (both decided by the server). Retried on UNAVAILABLE
        unless it is an unconditional append."""
        request = storage_pb2.WriteDocumentRequest(
            space=self._space(space),
            path=path,
            content=content,
            mode=storage_pb2.WRITE_MODE_APPEND if append else storage_pb2.WRITE_MODE_REPLACE,
            expected_sha256=expected_sha256,
            create_only=create_only,
            append_as_line=append_as_line,
            prefix_if_created=prefix_if_created,
        )
        response = await self._call(
            "StorageService.WriteDocument",
            self._stub(_storage).WriteDocument,
            request,
            idempotent=not append or bool(expected_sha256) or create_only,
        )
        from engram.client.results.documents import document_write

        return document_write(response)

    async def delete_document(
        self, path: str, *, expected_sha256: str = "", space: AnySpace | None = None
    ) -> Deletion:
        """Deletes a document; returns the bytes freed. NotFound if absent. Retried on
        UNAVAILABLE only with `expected_sha256` (a repeat of a delete that landed unseen
        then answers NotFound instead of deleting a newer document)."""
        request = storage_pb2.DeleteDocumentRequest(
            space=self._space(space), path=path, expected_sha256=expected_sha256
        )
        response = await self._call(
            "StorageService.DeleteDocument",
            self._stub(_storage).DeleteDocument,
            request,
            idempotent=bool(expected_sha256),
        )
        position = position_from_proto(response.position) if response.HasField("position") else None
        return Deletion(response.deleted_bytes, position)

    async def list_documents(
        self,
        dir: str = "",
        *,
        recursive: bool = False,
        page_size: int = 0,
        page_token: str = "",
        space: AnySpace | None = None,
    ) -> DocumentPage:
        """One page of a directory listing, in path order (page_size 0 = 100)."""
        request = storage_pb2.ListDocumentsRequest(
            space=self._space(space),
            dir=dir,
            recursive=recursive,
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(
            "StorageService.ListDocuments",
            self._stub(_storage).ListDocuments,
            request,
            idempotent=True,
        )
        from engram.client.results.listing import document_page

        return document_page(response)

    async def iter_documents(
        self,
        dir: str = "",
        *,
        recursive: bool = False,
        page_size: int = 0,
        space: AnySpace | None = None,
    ) -> AsyncIterator[DirectoryEntry]:
        """Every entry of a directory listing (every page), in path order."""

        from engram.client.results.page import Page

        async def page(token: str) -> Page[DirectoryEntry]:
            found = await self.list_documents(
                dir, recursive=recursive, page_size=page_size, page_token=token, space=space
            )
            return Page(found.entries, found.next_page_token)

        async for entry in pages(page):
            yield entry

    async def list_document_versions(
        self,
        path: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        space: AnySpace | None = None,
    ) -> Page[DocumentVersion]:
        """One page of a document's kept versions, newest first (page_size 0 = 50)."""
        request = storage_pb2.ListDocumentVersionsRequest(
            space=self._space(space), path=path, page_size=page_size, page_token=page_token
        )
        response = await self._call(
            "StorageService.ListDocumentVersions",
            self._stub(_storage).ListDocumentVersions,
            request,
            idempotent=True,
        )
        from engram.client.results.page import Page
        from engram.client.results.versions import document_version

        return Page(tuple(document_version(v) for v in response.versions), response.next_page_token)

    async def iter_document_versions(
        self, path: str, *, page_size: int = 0, space: AnySpace | None = None
    ) -> AsyncIterator[DocumentVersion]:
        """Every kept version of a document, newest first."""

        async def page(token: str) -> Page[DocumentVersion]:
            return await self.list_document_versions(
                path, page_size=page_size, page_token=token, space=space
            )

        async for version in pages(page):
            yield version

    async def get_usage(self, *, space: AnySpace | None = None) -> Usage:
        """The space's bytes and documents, and its tenant's."""
        request = storage_pb2.GetUsageRequest(space=self._space(space))
        response = await self._call(
            "StorageService.GetUsage", self._stub(_storage).GetUsage, request, idempotent=True
        )
        from engram.client.results.usage import usage

        return usage(response)

    async def export_chunks(self, *, space: AnySpace | None = None) -> AsyncIterator[bytes]:
        """The space as a gzipped tar, chunk by chunk (reopened on UNAVAILABLE before the
        first chunk; `stream_timeout` bounds the whole export)."""
        request = storage_pb2.ExportSpaceRequest(space=self._space(space))
        stream = self._stream(
            "StorageService.ExportSpace",
            self._stub(_storage).ExportSpace,
            request,
            deadline=self.stream_timeout,
            retry_before_first=True,
        )
        async for message in stream:
            yield message.data

    async def export_space(
        self,
        out: str | os.PathLike[str] | BinaryIO,
        *,
        progress: Progress | None = None,
        space: AnySpace | None = None,
    ) -> int:
        """Writes the space's gzipped tar to `out` (a path, or a binary file left open);
        returns its size. `progress` is called with the bytes written so far."""
        if not isinstance(out, str | os.PathLike):
            return await self._export_to(out, progress, space)
        handle = await self._offload(Path(out).open, "wb")
        try:
            return await self._export_to(handle, progress, space)
        finally:
            await self._offload(handle.close)

    async def _export_to(
        self, handle: BinaryIO, progress: Progress | None, space: AnySpace | None
    ) -> int:
        done = 0
        async for chunk in self.export_chunks(space=space):
            await self._offload(handle.write, chunk)
            done += len(chunk)
            if progress is not None:
                progress(done)
        await self._offload(handle.flush)
        return done

    async def import_space(
        self,
        source: ImportSource,
        *,
        strategy: str = "skip",
        skip_unsupported: bool = False,
        progress: Progress | None = None,
        space: AnySpace | None = None,
    ) -> ImportResult:
        """Imports a gzipped tar (see ImportSource) into the space: "skip", "overwrite" or
        "rename" paths that exist. The server checks the whole archive first; a bad one is
        refused whole (InvalidArchive ...). `progress` gets the bytes sent so far."""
        kind = IMPORT_STRATEGIES.get(strategy)
        if kind is None:
            raise InvalidArgument(
                f"strategy {strategy!r} is not one of {', '.join(IMPORT_STRATEGIES)}",
                field="strategy",
            )
        first = storage_pb2.ImportSpaceRequest(
            space=self._space(space), strategy=kind, skip_unsupported=skip_unsupported
        )

        async def requests() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
            yield first
            done = 0
            async for chunk in _chunks(source, self._offload):
                done += len(chunk)
                yield storage_pb2.ImportSpaceRequest(data=chunk)
                if progress is not None:
                    progress(done)

        response = await self._send_stream(
            "StorageService.ImportSpace",
            self._stub(_storage).ImportSpace,
            requests(),
            deadline=self.stream_timeout,
        )
        from engram.client.results.transfer import import_result

        return import_result(response)

    async def purge_document(self, path: str, *, space: AnySpace | None = None) -> Purge:
        """Erases a document for good (content, kept versions, index chunks); idempotent."""
        request = storage_pb2.PurgeDocumentRequest(space=self._space(space), path=path)
        response = await self._call(
            "StorageService.PurgeDocument",
            self._stub(_storage).PurgeDocument,
            request,
            idempotent=True,
        )
        from engram.client.results.erasure import purge

        return purge(response)

    async def delete_space(
        self, *, confirm_space_id: str, space: AnySpace | None = None
    ) -> SpaceDeletion:
        """Erases a whole space; `confirm_space_id` must be its id. Idempotent."""
        request = storage_pb2.DeleteSpaceRequest(
            space=self._space(space), confirm_space_id=confirm_space_id
        )
        response = await self._call(
            "StorageService.DeleteSpace", self._stub(_storage).DeleteSpace, request, idempotent=True
        )
        from engram.client.results.erasure import space_deletion

        return space_deletion(response)

    async def list_spaces(
        self,
        *,
        tenant: str = "",
        global_spaces: bool = False,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[SpaceSummary]:
        """One page of a tenant's spaces that hold documents (yours by default), or of the
        global spaces, in space id order."""
        request = storage_pb2.ListSpacesRequest(
            tenant=tenant, page_size=page_size, page_token=page_token
        )
        setattr(request, "global", global_spaces)  # noqa: B010 - `global` is a keyword
        response = await self._call(
            "StorageService.ListSpaces", self._stub(_storage).ListSpaces, request, idempotent=True
        )
        from engram.client.results.page import Page
        from engram.client.results.spaces import space_summary

        return Page(tuple(space_summary(s) for s in response.spaces), response.next_page_token)

    async def iter_spaces(
        self, *, tenant: str = "", global_spaces: bool = False, page_size: int = 0
    ) -> AsyncIterator[SpaceSummary]:
        """Every space of list_spaces, page after page."""

        async def page(token: str) -> Page[SpaceSummary]:
            return await self.list_spaces(
                tenant=tenant, global_spaces=global_spaces, page_size=page_size, page_token=token
            )

        async for summary in pages(page):
            yield summary

    async def list_all_documents(
        self, *, page_size: int = 0, page_token: str = ""
    ) -> Page[tuple[str, str]]:
        """One page of (space_id, path) of every live document of every space, in that order
        (service principals only)."""
        request = storage_pb2.ListAllDocumentsRequest(page_size=page_size, page_token=page_token)
        response = await self._call(
            "StorageService.ListAllDocuments",
            self._stub(_storage).ListAllDocuments,
            request,
            idempotent=True,
        )
        from engram.client.results.page import Page

        documents = tuple((d.space_id, d.path) for d in response.documents)
        return Page(documents, response.next_page_token)

    async def iter_all_documents(self, *, page_size: int = 0) -> AsyncIterator[tuple[str, str]]:
        """Every document of list_all_documents, page after page."""

        async def page(token: str) -> Page[tuple[str, str]]:
            return await self.list_all_documents(page_size=page_size, page_token=token)

        async for document in pages(page):
            yield document

    async def watch_space(
        self,
        *,
        cursor: str = "",
        from_start: bool = False,
        space: AnySpace | None = None,
        on_resume: Callable[[EngramError], None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """The space's changes after `cursor` (or, with `from_start`, every retained one),
        then each new one as it happens, until the caller stops. When the server goes away
        (UNAVAILABLE, or the stream ends) the watch resumes from the last cursor received,
        with backoff, nothing missed or repeated; `on_resume` hears why. A server that never
        answered fails after `retries` attempts. The first request carries `cursor` and
        `from_start` as given (the server refuses both at once); a resume carries the last
        cursor received, or, before any change arrived, the caller's own start."""
        from engram.client.results.feed import watch_event

        connected = False
        failures = 0
        while True:
            request = storage_pb2.WatchSpaceRequest(
                space=self._space(space), cursor=cursor, from_start=from_start
            )
            try:
                async for message in self._stream(
                    "StorageService.WatchSpace",
                    self._stub(_storage).WatchSpace,
                    request,
                    deadline=None,
                ):
                    connected, failures = True, 0
                    event = watch_event(message)
                    if event.change is not None:
                        cursor, from_start = event.change.cursor, False
                    yield event
                why: EngramError = Unavailable("StorageService.WatchSpace: the stream ended")
            except Unavailable as error:
                if not connected and failures >= self.retries:
                    raise
                why = error
            failures += 1
            if on_resume is not None:
                on_resume(why)
            delay = backoff(min(failures, 5))
            log.warning("StorageService.WatchSpace resuming in %.2f s: %s", delay, why.message)
            await self._sleep(delay)


async def _chunks(source: ImportSource, offload: Offload) -> AsyncIterator[bytes]:
    if isinstance(source, bytes):
        for start in range(0, len(source), CHUNK_BYTES):
            yield source[start : start + CHUNK_BYTES]
    elif isinstance(source, str | os.PathLike):
        handle = await offload(Path(source).open, "rb")
        try:
            async for chunk in _read_file(handle, offload):
                yield chunk
        finally:
            await offload(handle.close)
    elif isinstance(source, AsyncIterable):
        async for chunk in source:
            yield chunk
    elif hasattr(source, "read"):
        async for chunk in _read_file(cast("BinaryIO", source), offload):
            yield chunk
    else:
        for chunk in source:
            yield chunk


async def _read_file(handle: BinaryIO, offload: Offload) -> AsyncIterator[bytes]:
    while chunk := await offload(handle.read, CHUNK_BYTES):
        yield chunk
