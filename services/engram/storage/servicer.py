"""StorageService servicer: protobuf in, domain call, protobuf out. No rules live here."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from engram.domain.errors import InvalidArgument
from engram.runtime.context import current_principal
from engram.storage import mapping
from engram.storage.service import Appending, StorageService
from engram.storage.upkeep_servicer import UpkeepRpcs
from engram.v1 import storage_pb2, storage_pb2_grpc
from engram.wire import requested_space

Context = grpc.aio.ServicerContext[Any, Any]

EXPORT_CHUNK_BYTES = 256 * 1024


class StorageServicer(UpkeepRpcs, storage_pb2_grpc.StorageServiceServicer):
    def __init__(self, service: StorageService) -> None:
        self._service = service

    async def ReadDocument(
        self, request: storage_pb2.ReadDocumentRequest, context: Context
    ) -> storage_pb2.ReadDocumentResponse:
        document, _ = await self._service.read(
            current_principal(),
            requested_space(request.space),
            request.path,
            version=request.version,
        )
        return storage_pb2.ReadDocumentResponse(
            document=mapping.document_to_proto(document, with_content=True)
        )

    async def WriteDocument(
        self, request: storage_pb2.WriteDocumentRequest, context: Context
    ) -> storage_pb2.WriteDocumentResponse:
        mode = mapping.WRITE_MODES.get(request.mode)
        if mode is None:
            raise InvalidArgument(
                "mode must be WRITE_MODE_REPLACE or WRITE_MODE_APPEND", field="mode"
            )
        result = await self._service.write(
            current_principal(),
            requested_space(request.space),
            request.path,
            request.content,
            mode=mode,
            expected_sha256=request.expected_sha256,
            create_only=request.create_only,
            appending=Appending(
                as_line=request.append_as_line, created_prefix=request.prefix_if_created
            ),
        )
        return mapping.write_response(result)

    async def DeleteDocument(
        self, request: storage_pb2.DeleteDocumentRequest, context: Context
    ) -> storage_pb2.DeleteDocumentResponse:
        deleted = await self._service.delete_document(
            current_principal(),
            requested_space(request.space),
            request.path,
            expected_sha256=request.expected_sha256,
        )
        return storage_pb2.DeleteDocumentResponse(
            deleted_bytes=deleted.size_bytes,
            position=mapping.position_of(deleted.document, deleted=True),
        )

    async def ListDocuments(
        self, request: storage_pb2.ListDocumentsRequest, context: Context
    ) -> storage_pb2.ListDocumentsResponse:
        page = await self._service.list_directory(
            current_principal(),
            requested_space(request.space),
            request.dir,
            recursive=request.recursive,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return storage_pb2.ListDocumentsResponse(
            entries=[mapping.entry_to_proto(item) for item in page.items],
            next_page_token=page.next_page_token,
        )

    async def ListDocumentVersions(
        self, request: storage_pb2.ListDocumentVersionsRequest, context: Context
    ) -> storage_pb2.ListDocumentVersionsResponse:
        page = await self._service.list_versions(
            current_principal(),
            requested_space(request.space),
            request.path,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return storage_pb2.ListDocumentVersionsResponse(
            versions=[mapping.version_to_proto(version) for version in page.items],
            next_page_token=page.next_page_token,
        )

    async def GetUsage(
        self, request: storage_pb2.GetUsageRequest, context: Context
    ) -> storage_pb2.GetUsageResponse:
        report = await self._service.usage(current_principal(), requested_space(request.space))
        return mapping.usage_to_proto(report)

    async def ExportSpace(
        self, request: storage_pb2.ExportSpaceRequest, context: Context
    ) -> AsyncIterator[storage_pb2.ExportSpaceResponse]:
        chunks = await self._service.export(current_principal(), requested_space(request.space))
        # Closed at once when the client goes away, so what the export holds is let go then,
        # not when the garbage collector finds its generator.
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                for start in range(0, len(data), EXPORT_CHUNK_BYTES):
                    yield storage_pb2.ExportSpaceResponse(
                        data=data[start : start + EXPORT_CHUNK_BYTES]
                    )

    async def WatchSpace(
        self, request: storage_pb2.WatchSpaceRequest, context: Context
    ) -> AsyncIterator[storage_pb2.WatchSpaceResponse]:
        items = await self._service.watch(
            current_principal(),
            requested_space(request.space),
            cursor=request.cursor,
            from_start=request.from_start,
        )
        # Closed at once when the client goes away, so the watch's slot comes back.
        async with contextlib.aclosing(items):
            async for item in items:
                yield mapping.watch_response(item)

    async def ImportSpace(
        self, request_iterator: AsyncIterator[storage_pb2.ImportSpaceRequest], context: Context
    ) -> storage_pb2.ImportSpaceResponse:
        # The first message names the space: it is authorized before any more is read.
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("space"):
            raise InvalidArgument(
                "the first ImportSpace message must carry space and strategy", field="space"
            )
        strategy = mapping.IMPORT_STRATEGIES.get(first.strategy)
        if strategy is None:
            raise InvalidArgument(
                "strategy must be IMPORT_STRATEGY_SKIP, _OVERWRITE or _RENAME", field="strategy"
            )
        stream = await self._service.begin_import(
            current_principal(),
            requested_space(first.space),
            strategy,
            skip_unsupported=first.skip_unsupported,
        )
        try:
            await stream.feed(first.data)
            async for message in request_iterator:
                await stream.feed(message.data)
            result = await stream.commit()
        finally:
            stream.close()
        return mapping.import_response(result)

    async def PurgeDocument(
        self, request: storage_pb2.PurgeDocumentRequest, context: Context
    ) -> storage_pb2.PurgeDocumentResponse:
        result = await self._service.purge(
            current_principal(), requested_space(request.space), request.path
        )
        return mapping.purge_response(result)

    async def DeleteSpace(
        self, request: storage_pb2.DeleteSpaceRequest, context: Context
    ) -> storage_pb2.DeleteSpaceResponse:
        result = await self._service.delete_space(
            current_principal(), requested_space(request.space), request.confirm_space_id
        )
        return mapping.delete_space_response(result)

    async def ListSpaces(
        self, request: storage_pb2.ListSpacesRequest, context: Context
    ) -> storage_pb2.ListSpacesResponse:
        page = await self._service.list_spaces(
            current_principal(),
            request.tenant,
            global_=getattr(request, "global"),  # a Python keyword
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return storage_pb2.ListSpacesResponse(
            spaces=[mapping.space_summary_to_proto(summary) for summary in page.items],
            next_page_token=page.next_page_token,
        )

    async def ListAllDocuments(
        self, request: storage_pb2.ListAllDocumentsRequest, context: Context
    ) -> storage_pb2.ListAllDocumentsResponse:
        page = await self._service.list_all_documents(
            current_principal(), page_size=request.page_size, page_token=request.page_token
        )
        return storage_pb2.ListAllDocumentsResponse(
            documents=[
                storage_pb2.ListedDocument(space_id=space_id, path=path)
                for space_id, path in page.items
            ],
            next_page_token=page.next_page_token,
        )
