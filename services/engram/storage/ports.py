"""The interfaces the storage service needs from its backends and neighbours."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from engram.domain.changes import FeedItem, FeedStart
from engram.domain.documents import (
    DocumentDeletion,
    DocumentHead,
    DocumentVersion,
    DocumentWrite,
    Erasure,
    ErasureResult,
    PathEntry,
    SpaceSummary,
    SpaceUsage,
    StoredDocument,
)
from engram.domain.errors import Conflict
from engram.domain.ports import UsageReport
from engram.domain.spaces import SpaceRef


class ConcurrentModification(Conflict):
    """The stored version moved on between read and conditional write; retry."""

    reason = "CONCURRENT_MODIFICATION"


class DocumentRepository(Protocol):
    """Documents keyed by (space_id, path), their kept versions and pending events.

    Every change records its DocumentEvent atomically with the document (the outbox).
    """

    async def get(
        self, space_id: str, path: str, *, trust_head: bool = False
    ) -> StoredDocument | None:
        """The live document at `path`, or None. `trust_head` allows a cheaper read that may
        miss a change committed by another process and not yet fully applied (a backend
        without that distinction ignores it): only for the read of a write whose
        conditional commit would fail on such a change."""
        ...

    async def head(self, space_id: str, path: str) -> DocumentHead | None:
        """The live document's metadata without its content, or None: a read that may miss
        a change as `get(trust_head=True)` may (a backend that keeps both together reads
        them together), for the read of a replace whose conditional commit would fail on
        such a change; the `save` that follows may reuse what it found."""
        ...

    async def get_many(self, space_id: str, paths: Sequence[str]) -> dict[str, StoredDocument]: ...

    async def save(self, change: DocumentWrite) -> StoredDocument:
        """Applies a conditional write; raises ConcurrentModification if the version moved."""
        ...

    async def save_many(self, changes: Sequence[DocumentWrite]) -> list[StoredDocument]:
        """Applies conditional writes all or nothing; ConcurrentModification if any moved."""
        ...

    async def delete(self, deletion: DocumentDeletion) -> None:
        """Applies a conditional delete; raises ConcurrentModification if the version moved."""
        ...

    async def list_paths(
        self, space_id: str, *, directory: str, start: str, inclusive: bool, limit: int
    ) -> list[PathEntry]:
        """Documents under `directory` ('' = all) from `start` on, in byte order of path."""
        ...

    async def get_version(self, space_id: str, path: str, version: int) -> DocumentVersion | None:
        """Kept version `version` of the current document (or of the last deleted one)."""
        ...

    async def list_versions(
        self, space_id: str, path: str, *, before_seq: int | None, limit: int
    ) -> list[DocumentVersion]:
        """Kept (non-current) versions, newest first, with seq below `before_seq`."""
        ...

    async def space_usage(self, space_id: str) -> SpaceUsage: ...

    async def prune_versions(self, space_id: str) -> int:
        """Erases the space's kept versions beyond the retention (the write path prunes only
        the document it writes, so a lowered retention leaves older versions until the
        document's next write); returns how many were erased."""
        ...

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        """Bytes per space of a tenant ("instance" = global spaces), from stored documents."""
        ...

    async def list_spaces(
        self, aggregate_owner: str, *, after: str, limit: int
    ) -> list[SpaceSummary]:
        """The spaces of a tenant ("instance" = global spaces) holding live documents, with
        space id > `after`, in space id order."""
        ...

    async def all_spaces(self, *, after: str, limit: int) -> list[SpaceRef]:
        """Every space of every tenant (and the global ones) holding live documents, with
        space id > `after`, in space id order (the maintenance worker's walk)."""
        ...

    async def all_paths(self, *, after: tuple[str, str], limit: int) -> list[tuple[str, str]]:
        """(space_id, path) of every live document of every space, after `after` ("", ""
        = from the start), in that order (the indexer's catalog, ListAllDocuments)."""
        ...

    async def erase(self, erasure: Erasure) -> ErasureResult:
        """Erases the document at erasure.path (or, for an empty path, every document of the
        space) with every kept version, recording a PURGE (SPACE_DELETE) event with it.
        Nothing stored: changes nothing, records no event, returns zeros (idempotent).
        Raises ConcurrentModification if a write raced it; retry."""
        ...


class QuotaGate(Protocol):
    """Byte accounting: the in-process QuotaService or a client of the remote one."""

    async def charge(
        self,
        space: SpaceRef,
        delta_bytes: int,
        idempotency_key: str,
        *,
        attributed_tenant: str = "",
    ) -> None:
        """Applies the delta or raises QuotaExceeded; shrinking always succeeds.
        `attributed_tenant`: for a global space, the tenant that made the change."""
        ...

    async def usage(self, space: SpaceRef) -> UsageReport: ...


class ChangeNotifier(Protocol):
    """Told after every committed change, so an outbox relay can publish without polling."""

    def changed(self) -> None: ...


class ChangeFeed(Protocol):
    """A space's changes, read from the durable events the indexer consumes."""

    def changes(self, space_id: str, start: FeedStart) -> AsyncGenerator[FeedItem, None]:
        """The space's changes after `start`, oldest first, each once; CAUGHT_UP once every
        change stored so far was sent; then live changes until the caller stops iterating.
        Raises CursorExpired / CursorAhead before the first change, Unavailable when the
        event log cannot be read."""
        ...
