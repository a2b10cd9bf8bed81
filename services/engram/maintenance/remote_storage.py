"""The maintenance ports over gRPC (`engram serve maintenance`): StorageService and
QuotaService called through engram.client as the maintenance service principal
(ENGRAM_SERVICE_TOKEN). The worker owns no documents: every read, write, scan and prune
goes through StorageService's RPCs. Failed calls come back as the same domain errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import grpc

from engram.client import Document, EngramClient, Space
from engram.domain.documents import PathEntry, StoredDocument
from engram.domain.spaces import SpaceRef, Visibility
from engram.quota.service import Drift, ReconcileReport

# Entries and documents asked for at a time.
PATH_PAGE = 1000
DOCUMENT_PAGE = 100
# What a document without a recorded time reports (as an unset protobuf Timestamp).
EPOCH = datetime.fromtimestamp(0, UTC)


class _Remote:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 30.0) -> None:
        self._client = EngramClient(channel=channel, token=token, timeout=timeout)


class RemoteStorage(_Remote):
    """MaintenanceStorage over StorageService's RPCs."""

    async def read(self, space: SpaceRef, path: str) -> StoredDocument:
        return _stored(space, await self._client.read_document(path, space=space))

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
        written = await self._client.write_document(
            path,
            content,
            append=append,
            expected_sha256=expected_sha256,
            create_only=create_only,
            space=space,
        )
        return written.bytes_delta

    async def delete(self, space: SpaceRef, path: str, *, expected_sha256: str) -> None:
        await self._client.delete_document(path, expected_sha256=expected_sha256, space=space)

    async def list_paths(
        self, space: SpaceRef, directory: str = "", *, recursive: bool = True
    ) -> AsyncIterator[PathEntry]:
        entries = self._client.iter_documents(
            directory, recursive=recursive, page_size=PATH_PAGE, space=space
        )
        async for entry in entries:
            if not entry.is_dir:
                yield PathEntry(entry.path, entry.size_bytes, entry.updated_at or EPOCH)

    async def documents(self, space: SpaceRef) -> AsyncIterator[StoredDocument]:
        async for document in self._client.iter_scan_documents(
            page_size=DOCUMENT_PAGE, space=space
        ):
            yield _stored(space, document)

    async def prune_versions(self, space: SpaceRef) -> int:
        return await self._client.prune_versions(space=space)

    async def space_page(self, *, page_token: str, limit: int) -> tuple[list[SpaceRef], str]:
        page = await self._client.list_all_spaces(page_size=limit, page_token=page_token)
        return [_space_ref(space) for space in page.items], page.next_page_token


class RemoteReconciler(_Remote):
    """UsageReconciler over QuotaService's Reconcile."""

    async def reconcile(self, tenant: str) -> ReconcileReport:
        done = await self._client.reconcile(tenant)
        return ReconcileReport(
            drifts=[Drift(d.counter, d.recorded_bytes, d.actual_bytes) for d in done.drifts],
            spaces_checked=done.spaces_checked,
        )


def _space_ref(space: Space) -> SpaceRef:
    return SpaceRef.create(
        Visibility(space.visibility),
        tenant=space.tenant,
        name=space.name,
        project=space.project,
        bot=space.bot,
        user=space.user,
    )


def _stored(space: SpaceRef, document: Document) -> StoredDocument:
    return StoredDocument(
        space=space,
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
