"""StorageService's upkeep calls, for service principals (QuotaService, the maintenance
worker): stored usage, version pruning, the walk of every space and document scans."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from engram.client import mapping
from engram.client.base import AnySpace, ClientBase, pages
from engram.v1 import storage_pb2, storage_pb2_grpc

if TYPE_CHECKING:
    from engram.client.models import Space
    from engram.client.results.documents import Document
    from engram.client.results.page import Page
    from engram.client.results.usage import StoredUsage


def _storage(channel: grpc.aio.Channel) -> storage_pb2_grpc.StorageServiceAsyncStub:
    return storage_pb2_grpc.StorageServiceStub(channel)


class UpkeepCalls(ClientBase):
    """StorageService's service-principal-only RPCs."""

    async def stored_usage(self, space_id: str) -> StoredUsage:
        """Bytes and documents stored in the space with this id."""
        request = storage_pb2.GetStoredUsageRequest(space_id=space_id)
        response = await self._call(
            "StorageService.GetStoredUsage",
            self._stub(_storage).GetStoredUsage,
            request,
            idempotent=True,
        )
        from engram.client.results.usage import stored_usage

        return stored_usage(response)

    async def sum_stored_usage(
        self, *, tenant: str = "", global_spaces: bool = False
    ) -> dict[str, int]:
        """Bytes stored per space id of a tenant (or of the global spaces), in one call."""
        request = storage_pb2.SumStoredUsageRequest(tenant=tenant)
        setattr(request, "global", global_spaces)  # noqa: B010 - `global` is a keyword
        response = await self._call(
            "StorageService.SumStoredUsage",
            self._stub(_storage).SumStoredUsage,
            request,
            idempotent=True,
        )
        return {space.space_id: space.used_bytes for space in response.spaces}

    async def prune_versions(self, *, space: AnySpace | None = None) -> int:
        """Erases the space's kept versions beyond the retention; returns how many.
        Retried on UNAVAILABLE: a repeat erases nothing more."""
        request = storage_pb2.PruneVersionsRequest(space=self._space(space))
        response = await self._call(
            "StorageService.PruneVersions",
            self._stub(_storage).PruneVersions,
            request,
            idempotent=True,
        )
        return response.versions_pruned

    async def list_all_spaces(self, *, page_size: int = 0, page_token: str = "") -> Page[Space]:
        """One page of every space holding documents (every tenant's and the global ones),
        in space id order."""
        request = storage_pb2.ListAllSpacesRequest(page_size=page_size, page_token=page_token)
        response = await self._call(
            "StorageService.ListAllSpaces",
            self._stub(_storage).ListAllSpaces,
            request,
            idempotent=True,
        )
        from engram.client.results.page import Page

        return Page(
            tuple(mapping.space_from_proto(s) for s in response.spaces), response.next_page_token
        )

    async def scan_documents(
        self, *, page_size: int = 0, page_token: str = "", space: AnySpace | None = None
    ) -> Page[Document]:
        """One page of the space's live documents with their content, in path order."""
        request = storage_pb2.ScanDocumentsRequest(
            space=self._space(space), page_size=page_size, page_token=page_token
        )
        response = await self._call(
            "StorageService.ScanDocuments",
            self._stub(_storage).ScanDocuments,
            request,
            idempotent=True,
        )
        from engram.client.results.documents import document
        from engram.client.results.page import Page

        return Page(tuple(document(d) for d in response.documents), response.next_page_token)

    async def iter_scan_documents(
        self, *, page_size: int = 0, space: AnySpace | None = None
    ) -> AsyncIterator[Document]:
        """Every live document of the space with its content, page after page."""

        async def page(token: str) -> Page[Document]:
            return await self.scan_documents(page_size=page_size, page_token=token, space=space)

        async for document in pages(page):
            yield document
