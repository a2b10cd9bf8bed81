"""The maintenance ports in process (`engram dev`): the local StorageService and
QuotaService, called as the maintenance principal like any other caller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from engram.domain.documents import PathEntry, StoredDocument
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.quota.service import QuotaService, ReconcileReport
from engram.storage.service import StorageService, WriteMode

# Entries and documents asked for at a time.
PATH_PAGE = 1000
DOCUMENT_PAGE = 100
# What a listed document without a recorded change time reports.
EPOCH = datetime.fromtimestamp(0, UTC)


class LocalStorage:
    """MaintenanceStorage over the process's own StorageService."""

    def __init__(self, storage: StorageService, principal: Principal) -> None:
        self._storage = storage
        self._principal = principal

    async def read(self, space: SpaceRef, path: str) -> StoredDocument:
        document, _ = await self._storage.read(self._principal, space, path)
        return document

    async def write(
        self,
        space: SpaceRef,
        path: str,
        content: str,
        *,
        append: bool = False,
        expected_sha256: str = "",
        create_only: bool = False,
    ) -> int:
        result = await self._storage.write(
            self._principal,
            space,
            path,
            content,
            mode=WriteMode.APPEND if append else WriteMode.REPLACE,
            expected_sha256=expected_sha256,
            create_only=create_only,
        )
        return result.bytes_delta

    async def delete(self, space: SpaceRef, path: str, *, expected_sha256: str) -> None:
        await self._storage.delete(self._principal, space, path, expected_sha256=expected_sha256)

    async def list_paths(
        self, space: SpaceRef, directory: str = "", *, recursive: bool = True
    ) -> AsyncIterator[PathEntry]:
        token = ""
        while True:
            page = await self._storage.list_directory(
                self._principal,
                space,
                directory,
                recursive=recursive,
                page_size=PATH_PAGE,
                page_token=token,
            )
            for item in page.items:
                if not item.is_dir:
                    yield PathEntry(item.path, item.size_bytes, item.updated_at or EPOCH)
            token = page.next_page_token
            if not token:
                return

    async def documents(self, space: SpaceRef) -> AsyncIterator[StoredDocument]:
        token = ""
        while True:
            page = await self._storage.upkeep.scan_documents(
                self._principal, space, page_size=DOCUMENT_PAGE, page_token=token
            )
            for document in page.items:
                yield document
            token = page.next_page_token
            if not token:
                return

    async def prune_versions(self, space: SpaceRef) -> int:
        return await self._storage.upkeep.prune_versions(self._principal, space)

    async def space_page(self, *, page_token: str, limit: int) -> tuple[list[SpaceRef], str]:
        page = await self._storage.upkeep.all_spaces(
            self._principal, page_size=limit, page_token=page_token
        )
        return page.items, page.next_page_token


class LocalReconciler:
    """UsageReconciler over the process's own QuotaService."""

    def __init__(self, quota: QuotaService, principal: Principal) -> None:
        self._quota = quota
        self._principal = principal

    async def reconcile(self, tenant: str) -> ReconcileReport:
        return await self._quota.reconcile(self._principal, tenant)
