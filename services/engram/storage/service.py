"""StorageService: the storage use cases, one room per family (engram.storage.rooms).

Every use case authorizes first (stamping tenant and user from the identity), validates,
then talks to the repository. This class only builds the rooms over one shared core and
hands each call to its room; callers (the servicer, workspace, maintenance) see one service.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from datetime import datetime

from engram.domain.changes import FeedItem
from engram.domain.documents import DocumentVersion, SpaceSummary, StoredDocument
from engram.domain.ports import AuditSink, Authorizer
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.storage.imports import ImportStream
from engram.storage.ports import ChangeFeed, ChangeNotifier, DocumentRepository, QuotaGate
from engram.storage.rooms.archive import (
    ImportedEntry,
    ImportOutcome,
    ImportResult,
    ImportStrategy,
    SpaceArchives,
)
from engram.storage.rooms.catalog import DocumentCatalog
from engram.storage.rooms.core import (
    ContentFacts,
    DocumentLimits,
    Page,
    StorageCore,
    WriteMode,
    WriteResult,
    content_facts,
    utc_now,
)
from engram.storage.rooms.documents import (
    PLAIN_APPEND,
    Appending,
    Deletion,
    DirectoryItem,
    DocumentReads,
    DocumentWrites,
    SpaceUsageReport,
)
from engram.storage.rooms.erasure import Erasures, PurgeResult, SpaceDeletion
from engram.storage.rooms.feed import DEFAULT_MAX_WATCHERS, SpaceWatches
from engram.storage.rooms.upkeep import Upkeep
from engram.storage.rooms.versions import DocumentVersions

__all__ = [
    "PLAIN_APPEND",
    "Appending",
    "ContentFacts",
    "Deletion",
    "DirectoryItem",
    "DocumentLimits",
    "ImportOutcome",
    "ImportResult",
    "ImportStrategy",
    "ImportedEntry",
    "Page",
    "PurgeResult",
    "SpaceDeletion",
    "SpaceUsageReport",
    "StorageService",
    "WriteMode",
    "WriteResult",
    "content_facts",
    "utc_now",
]


class StorageService:
    def __init__(
        self,
        repository: DocumentRepository,
        quota: QuotaGate,
        authorizer: Authorizer,
        audit: AuditSink,
        notifier: ChangeNotifier,
        limits: DocumentLimits,
        *,
        clock: Callable[[], datetime] = utc_now,
        feed: ChangeFeed | None = None,
        max_watchers: int = DEFAULT_MAX_WATCHERS,
    ) -> None:
        core = StorageCore(repository, quota, authorizer, audit, notifier, limits, clock)
        self._limits = limits
        self._reads = DocumentReads(core)
        self._writes = DocumentWrites(core)
        self._versions = DocumentVersions(core)
        self._archives = SpaceArchives(core)
        self._erasures = Erasures(core)
        self._watches = SpaceWatches(core, feed, max_watchers)
        self._watchers = self._watches.watchers
        self._catalog = DocumentCatalog(core)
        # What other services need of the documents (quota, maintenance): services only.
        self.upkeep = Upkeep(core)

    @property
    def limits(self) -> DocumentLimits:
        return self._limits

    # --- documents ---------------------------------------------------------------------------

    async def read(
        self, principal: Principal, space: SpaceRef, path: str, *, version: int = 0
    ) -> tuple[StoredDocument, DocumentVersion | None]:
        """The current document, and the kept version asked for (None when version is 0)."""
        if version == 0:
            return await self._reads.read(principal, space, path), None
        return await self._versions.read(principal, space, path, version=version)

    async def list_directory(
        self,
        principal: Principal,
        space: SpaceRef,
        directory: str,
        *,
        recursive: bool,
        page_size: int,
        page_token: str,
    ) -> Page[DirectoryItem]:
        return await self._reads.list_directory(
            principal,
            space,
            directory,
            recursive=recursive,
            page_size=page_size,
            page_token=page_token,
        )

    async def usage(self, principal: Principal, space: SpaceRef) -> SpaceUsageReport:
        return await self._reads.usage(principal, space)

    async def write(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        content: str,
        *,
        mode: WriteMode = WriteMode.REPLACE,
        expected_sha256: str = "",
        create_only: bool = False,
        appending: Appending = PLAIN_APPEND,
    ) -> WriteResult:
        return await self._writes.write(
            principal,
            space,
            path,
            content,
            mode=mode,
            expected_sha256=expected_sha256,
            create_only=create_only,
            appending=appending,
        )

    async def delete(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str = ""
    ) -> int:
        """Deletes the document (keeping its content as a version); returns its size."""
        deleted = await self.delete_document(
            principal, space, path, expected_sha256=expected_sha256
        )
        return deleted.size_bytes

    async def delete_document(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str = ""
    ) -> Deletion:
        """`delete`, answering the deleted document too (its index position)."""
        return await self._writes.delete_document(
            principal, space, path, expected_sha256=expected_sha256
        )

    # --- versions ----------------------------------------------------------------------------

    async def list_versions(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        *,
        page_size: int,
        page_token: str,
    ) -> Page[DocumentVersion]:
        return await self._versions.list_versions(
            principal, space, path, page_size=page_size, page_token=page_token
        )

    # --- archive -----------------------------------------------------------------------------

    async def export(self, principal: Principal, space: SpaceRef) -> AsyncGenerator[bytes, None]:
        """Yields a gzipped tar of the space, document by document (authorized up front)."""
        return await self._archives.export(principal, space)

    async def begin_import(
        self,
        principal: Principal,
        space: SpaceRef,
        strategy: ImportStrategy,
        *,
        skip_unsupported: bool = False,
    ) -> ImportStream[ImportResult]:
        """Authorizes an import before a byte of it is read (see SpaceArchives)."""
        return await self._archives.begin_import(
            principal, space, strategy, skip_unsupported=skip_unsupported
        )

    async def import_archive(
        self,
        principal: Principal,
        space: SpaceRef,
        data: bytes,
        strategy: ImportStrategy,
        *,
        skip_unsupported: bool = False,
    ) -> ImportResult:
        """Imports a whole .tar.gz: every entry is validated before anything is written."""
        return await self._archives.import_archive(
            principal, space, data, strategy, skip_unsupported=skip_unsupported
        )

    # --- erasure and space administration ----------------------------------------------------

    async def purge(self, principal: Principal, space: SpaceRef, path: str) -> PurgeResult:
        return await self._erasures.purge(principal, space, path)

    async def delete_space(
        self, principal: Principal, space: SpaceRef, confirm_space_id: str
    ) -> SpaceDeletion:
        return await self._erasures.delete_space(principal, space, confirm_space_id)

    async def list_spaces(
        self,
        principal: Principal,
        tenant: str,
        *,
        global_: bool,
        page_size: int,
        page_token: str,
    ) -> Page[SpaceSummary]:
        return await self._erasures.list_spaces(
            principal, tenant, global_=global_, page_size=page_size, page_token=page_token
        )

    # --- the change feed ---------------------------------------------------------------------

    async def watch(
        self, principal: Principal, space: SpaceRef, *, cursor: str, from_start: bool
    ) -> AsyncGenerator[FeedItem, None]:
        return await self._watches.watch(principal, space, cursor=cursor, from_start=from_start)

    # --- the catalog -------------------------------------------------------------------------

    async def list_all_documents(
        self, principal: Principal, *, page_size: int, page_token: str
    ) -> Page[tuple[str, str]]:
        """(space_id, path) of every live document of every space (services only)."""
        return await self._catalog.list_all(principal, page_size=page_size, page_token=page_token)
