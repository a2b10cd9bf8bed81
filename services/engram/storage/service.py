"""Storage use cases: plain async methods taking domain types.

Every method authorizes first (stamping tenant and user from the identity), validates,
then talks to the repository. Writes are optimistic: read the current version, charge the
quota for growth, write conditionally on that version, and on a lost race refund and retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Generic, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from engram.domain.changes import FeedItem, FeedStart, WatcherSlots, feed_start
from engram.domain.content import (
    check_append,
    check_size,
    check_text,
    sha256_hex,
    word_count,
)
from engram.domain.documents import (
    DocumentDeletion,
    DocumentHead,
    DocumentVersion,
    DocumentWrite,
    Erasure,
    ErasureResult,
    PathEntry,
    SpaceSummary,
    StoredDocument,
)
from engram.domain.errors import (
    DocumentNotFound,
    EngramError,
    EtagMismatch,
    InvalidArgument,
    PermissionDenied,
    Unavailable,
    VersionNotFound,
    WriteContention,
    quoted,
)
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.paths import (
    directory_upper_bound,
    renamed_path,
    validate_directory,
    validate_document_path,
)
from engram.domain.policy import RPC_POLICY, TENANT_MISMATCH, Target, admits, rpc_target
from engram.domain.ports import AuditRecord, AuditSink, AuthorizedSpace, Authorizer, UsageReport
from engram.domain.principals import Action, Principal
from engram.domain.quotas import INSTANCE
from engram.domain.spaces import SpaceRef, validate_field, validate_space_ref
from engram.domain.text_rules import utf8_len
from engram.runtime.keyed_locks import KeyedLocks
from engram.runtime.tracing import current_trace_context
from engram.storage.archive import ArchiveEntry, ArchiveLimits, ArchiveWriter
from engram.storage.imports import FEED_BATCH_BYTES, ImportStream, InFlightBudget
from engram.storage.ports import (
    ChangeFeed,
    ChangeNotifier,
    ConcurrentModification,
    DocumentRepository,
    QuotaGate,
)

T = TypeVar("T")

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
LIST_PAGE = PageSize(default=100, maximum=1000)
VERSIONS_PAGE = PageSize(default=50, maximum=1000)
EXPORT_BATCH = 200
MAX_WRITE_ATTEMPTS = 100
IMPORT_ATTEMPTS = 5
MAX_RENAME_ATTEMPTS = 1000
SPACES_PAGE = PageSize(default=100, maximum=1000)
PURGE_RPC = "/engram.v1.StorageService/PurgeDocument"
DELETE_SPACE_RPC = "/engram.v1.StorageService/DeleteSpace"
LIST_SPACES_RPC = "/engram.v1.StorageService/ListSpaces"
ADMIN_ROLE_REQUIRED = "admin_role_required"
DEFAULT_MAX_WATCHERS = 256


class WriteMode(StrEnum):
    REPLACE = "replace"
    APPEND = "append"


@dataclass(frozen=True, slots=True)
class Appending:
    """How an append joins its document. `as_line`: the appended text starts on a line of
    its own (a newline goes first when the document does not end in one); `created_prefix`
    goes before it when the append creates the document. Both are decided on the document
    as the write finds it, under its lock, so concurrent appends cannot split them."""

    as_line: bool = False
    created_prefix: str = ""

    def joined(self, current: StoredDocument | None, content: str) -> str:
        """The text this append adds to `current` (all of it when creating)."""
        if current is None:
            return self.created_prefix + content
        if self.as_line and current.content and not current.content.endswith("\n"):
            return "\n" + content
        return content


PLAIN_APPEND = Appending()


class ImportStrategy(StrEnum):
    SKIP = "skip"
    OVERWRITE = "overwrite"
    RENAME = "rename"


class ImportOutcome(StrEnum):
    CREATED = "created"
    OVERWRITTEN = "overwritten"
    SKIPPED = "skipped"
    RENAMED = "renamed"
    UNCHANGED = "unchanged"
    # Left out because engram cannot store it (skip_unsupported).
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    max_doc_bytes: int
    max_import_bytes: int
    max_import_entries: int
    # Bytes all running imports of one principal may hold at once (in this process).
    max_import_inflight_bytes: int = 512 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WriteResult:
    document: StoredDocument
    created: bool
    bytes_delta: int


@dataclass(frozen=True, slots=True)
class Deletion:
    """A delete's outcome: the document as it was deleted, and its size (credited back)."""

    document: StoredDocument
    size_bytes: int


@dataclass(frozen=True, slots=True)
class DirectoryItem:
    path: str
    is_dir: bool
    size_bytes: int = 0
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class SpaceUsageReport:
    used_bytes: int
    quota_bytes: int
    tenant_used_bytes: int
    tenant_quota_bytes: int
    document_count: int


@dataclass(frozen=True, slots=True)
class PurgeResult:
    # False when nothing (no document, no kept version) was stored at the path.
    purged: bool
    versions_erased: int
    refunded_bytes: int


@dataclass(frozen=True, slots=True)
class SpaceDeletion:
    space_id: str
    # Paths erased: live documents, and deleted paths that still had kept versions.
    documents_erased: int
    versions_erased: int
    refunded_bytes: int


@dataclass(frozen=True, slots=True)
class ImportedEntry:
    path: str
    stored_path: str
    outcome: ImportOutcome
    # Why it was left out (UNSUPPORTED only).
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ImportResult:
    entries: list[ImportedEntry]
    bytes_written: int

    def count(self, *outcomes: ImportOutcome) -> int:
        return sum(1 for entry in self.entries if entry.outcome in outcomes)


def utc_now() -> datetime:
    """Now, to the millisecond: the precision every backend stores (BSON dates)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _on_conflict(attempts: int) -> AsyncRetrying:
    """Retries a read-check-commit step that lost a race (ConcurrentModification), at most
    `attempts` times in all. Full jitter from 1 ms, capped at 50 ms: spreads racing writers
    apart quickly without long stalls. Exhausted, it raises RetryError."""
    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.001, max=0.05),
        retry=retry_if_exception_type(ConcurrentModification),
    )


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
        self._repository = repository
        self._quota = quota
        self._authorizer = authorizer
        self._audit = audit
        self._notifier = notifier
        self._limits = limits
        self._import_budget = InFlightBudget(limits.max_import_inflight_bytes)
        self._clock = clock
        self._document_locks = KeyedLocks()
        self._feed = feed
        self._watchers = WatcherSlots(max_watchers)

    @property
    def limits(self) -> DocumentLimits:
        return self._limits

    # --- reads -------------------------------------------------------------------------------

    async def read(
        self, principal: Principal, space: SpaceRef, path: str, *, version: int = 0
    ) -> tuple[StoredDocument, DocumentVersion | None]:
        """The current document, and the kept version asked for (None when version is 0)."""
        granted = await self._authorize(principal, Action.READ, space)
        validate_document_path(path)
        if version < 0:
            raise InvalidArgument("version must be 0 (current) or positive", field="version")
        current = await self._repository.get(granted.space.id, path)
        if version == 0 or (current is not None and current.version == version):
            if current is None:
                raise DocumentNotFound(f"no document at {quoted(path)} in this space")
            return current, None
        kept = await self._repository.get_version(granted.space.id, path, version)
        if kept is None:
            raise VersionNotFound(
                f"version {version} of {quoted(path)} is not kept (see ListDocumentVersions)"
            )
        return _document_at(granted.space, path, kept, current), kept

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
        granted = await self._authorize(principal, Action.LIST, space)
        validate_directory(directory)
        limit = LIST_PAGE.resolve(page_size)
        scope = ("list", granted.space.id, directory, str(recursive))
        position = decode_page_token(page_token, scope) or {"start": "", "inclusive": True}
        start, inclusive = str(position["start"]), bool(position["inclusive"])
        prefix_len = len(directory) + 1 if directory else 0
        items: list[DirectoryItem] = []
        exhausted = False
        while len(items) < limit and not exhausted:
            wanted = limit - len(items)
            batch = await self._repository.list_paths(
                granted.space.id,
                directory=directory,
                start=start,
                inclusive=inclusive,
                limit=wanted,
            )
            exhausted = len(batch) < wanted
            for entry in batch:
                relative = entry.path[prefix_len:]
                if recursive or "/" not in relative:
                    items.append(_file_item(entry))
                    start, inclusive = entry.path, False
                    continue
                # A subdirectory: list it once, then continue after everything beneath it.
                subdirectory = entry.path[: prefix_len + relative.index("/")]
                items.append(DirectoryItem(path=subdirectory, is_dir=True))
                start, inclusive = directory_upper_bound(subdirectory), True
                exhausted = False
                break
        more = False
        if not exhausted:
            probe = await self._repository.list_paths(
                granted.space.id, directory=directory, start=start, inclusive=inclusive, limit=1
            )
            more = bool(probe)
        token = encode_page_token(scope, {"start": start, "inclusive": inclusive}) if more else ""
        return Page(items=items, next_page_token=token)

    async def list_versions(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        *,
        page_size: int,
        page_token: str,
    ) -> Page[DocumentVersion]:
        granted = await self._authorize(principal, Action.READ, space)
        validate_document_path(path)
        limit = VERSIONS_PAGE.resolve(page_size)
        scope = ("versions", granted.space.id, path)
        position = decode_page_token(page_token, scope)
        versions: list[DocumentVersion] = []
        before_seq: int | None = None
        if position is None:
            current = await self._repository.get(granted.space.id, path)
            if current is not None:
                versions.append(
                    DocumentVersion(
                        document_id=current.document_id,
                        version=current.version,
                        sha256=current.sha256,
                        size_bytes=current.size_bytes,
                        updated_at=current.updated_at,
                        updated_by=current.updated_by,
                        current=True,
                    )
                )
        else:
            before_seq = int(position["before"])
        kept = await self._repository.list_versions(
            granted.space.id, path, before_seq=before_seq, limit=limit - len(versions) + 1
        )
        room = limit - len(versions)
        versions.extend(kept[:room])
        if not versions and position is None:
            raise DocumentNotFound(f"no document or kept versions at {quoted(path)} in this space")
        token = ""
        if len(kept) > room:
            # The next page starts at the first kept version this one left out (the page
            # may hold only the current document, whose seq is no position among kept ones).
            token = encode_page_token(scope, {"before": kept[room].seq + 1})
        return Page(items=versions, next_page_token=token)

    async def usage(self, principal: Principal, space: SpaceRef) -> SpaceUsageReport:
        granted = await self._authorize(principal, Action.USAGE, space)
        report: UsageReport = await self._quota.usage(granted.space)
        stored = await self._repository.space_usage(granted.space.id)
        return SpaceUsageReport(
            used_bytes=report.space_used_bytes,
            quota_bytes=report.space_quota_bytes,
            tenant_used_bytes=report.aggregate_used_bytes,
            tenant_quota_bytes=report.aggregate_quota_bytes,
            document_count=stored.document_count,
        )

    async def export(self, principal: Principal, space: SpaceRef) -> AsyncIterator[bytes]:
        """Yields a gzipped tar of the space, document by document (authorized up front)."""
        granted = await self._authorize(principal, Action.EXPORT, space)
        return self._export_chunks(granted.space)

    async def _export_chunks(self, space: SpaceRef) -> AsyncIterator[bytes]:
        writer = ArchiveWriter()
        after = ""
        while True:
            batch = await self._repository.list_documents(space.id, after=after, limit=EXPORT_BATCH)
            if not batch:
                break
            data = await asyncio.to_thread(_archive_batch, writer, batch)
            if data:
                yield data
            after = batch[-1].path
        tail = await asyncio.to_thread(writer.close)
        if tail:
            yield tail

    async def watch(
        self, principal: Principal, space: SpaceRef, *, cursor: str, from_start: bool
    ) -> AsyncGenerator[FeedItem, None]:
        """The space's changes after `cursor` (authorized and validated up front), then live
        ones until the caller stops iterating; at most `max_watchers` at once per process."""
        granted = await self._authorize(principal, Action.READ, space)
        start = feed_start(cursor, from_start)
        if self._feed is None:
            raise Unavailable(
                "this server has no change feed (engram serve storage needs ENGRAM_NATS_URL "
                "for WatchSpace); retry against a server that publishes events"
            )
        return self._watch(self._feed, granted.space.id, start)

    async def _watch(
        self, feed: ChangeFeed, space_id: str, start: FeedStart
    ) -> AsyncGenerator[FeedItem, None]:
        # Taken when the stream starts, so a stream that never starts holds no slot.
        self._watchers.take()
        try:
            async with contextlib.aclosing(feed.changes(space_id, start)) as changes:
                async for item in changes:
                    yield item
        finally:
            self._watchers.give_back()

    # --- changes -----------------------------------------------------------------------------

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
        granted = await self._authorize(principal, Action.WRITE, space)
        validate_document_path(path)
        _validate_preconditions(expected_sha256, create_only)
        if mode is WriteMode.REPLACE:
            if appending != PLAIN_APPEND:
                raise InvalidArgument(
                    "append_as_line and prefix_if_created go with WRITE_MODE_APPEND only",
                    field="mode",
                )
            check_size(utf8_len(content), self._limits.max_doc_bytes)
            check_text(content)
        elif not content:
            raise InvalidArgument("append needs non-empty content", field="content")
        request = _WriteRequest(path, content, mode, expected_sha256, create_only, appending)
        async with self._document_locks.hold((granted.space.id, path)):
            return await self._write_locked(granted, principal, request)

    async def _write_locked(
        self, granted: AuthorizedSpace, principal: Principal, request: _WriteRequest
    ) -> WriteResult:
        try:
            async for attempt in _on_conflict(MAX_WRITE_ATTEMPTS):
                with attempt:
                    first = attempt.retry_state.attempt_number == 1
                    result, committed = await self._write_once(
                        granted, principal, request, first=first
                    )
        except RetryError:
            raise WriteContention(
                f"{quoted(request.path)} changed {MAX_WRITE_ATTEMPTS} times while this write "
                "was retried; try again"
            ) from None
        except Exception:
            # tenacity's retry state (a cycle of its own) keeps the failure, whose traceback
            # holds the callers' frames and the write's content until a full collection.
            attempt.retry_state.outcome = None  # issue 29
            raise
        if committed:
            await self._record_audit(granted, principal, request.path, result.bytes_delta)
        return result

    async def _write_once(
        self, granted: AuthorizedSpace, principal: Principal, request: _WriteRequest, *, first: bool
    ) -> tuple[WriteResult, bool]:
        """One attempt of a write: (its result, whether it committed). The first attempt's
        read trusts the path's head (one lookup fewer; for a replace, the head alone): the
        commit fails on anything newer, and the retry reads in full. A write decided without
        a commit (refused, or nothing to change) reads in full first."""
        if first and request.mode is WriteMode.REPLACE:
            replaced = await self._replace_on_head(granted, principal, request)
            if replaced is not None:
                return replaced, True
        trusted = first and request.mode is not WriteMode.REPLACE
        space_id, path = granted.space.id, request.path
        current = await self._repository.get(space_id, path, trust_head=trusted)
        try:
            new_content = self._planned(current, request)
            commits = current is None or new_content != current.content
        except EngramError:
            if not trusted:
                raise
            commits = False
        if trusted and not commits:
            current = await self._repository.get(space_id, path)
            new_content = self._planned(current, request)
        if current is not None and new_content == current.content:
            return WriteResult(current, created=False, bytes_delta=0), False
        return await self._commit_one(granted, principal, path, new_content, current), True

    async def _replace_on_head(
        self, granted: AuthorizedSpace, principal: Principal, request: _WriteRequest
    ) -> WriteResult | None:
        """A replace decided on the path's head, without reading its content; None when the
        head does not lead to a commit (refused, or the same content): that is decided on a
        full read instead."""
        path, content = request.path, request.content
        head = await self._repository.head(granted.space.id, path)
        facts = content_facts(content)
        if head is not None and head.sha256 == facts[0]:
            return None
        try:
            _check_etag(path, head, request.expected_sha256, request.create_only)
        except EtagMismatch:
            return None
        return await self._commit_one(granted, principal, path, content, head, facts)

    async def _commit_one(
        self,
        granted: AuthorizedSpace,
        principal: Principal,
        path: str,
        content: str,
        current: StoredDocument | DocumentHead | None,
        facts: ContentFacts | None = None,
    ) -> WriteResult:
        """Commits `content` over `current` (the document as the write decided on it)."""
        change = self._change(granted.space, path, content, current, principal, facts)
        delta = change.size_bytes - (current.size_bytes if current else 0)
        stored = await self._commit(granted, [change], delta)
        return WriteResult(stored[0], created=current is None, bytes_delta=delta)

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
        granted = await self._authorize(principal, Action.DELETE, space)
        validate_document_path(path)
        _validate_preconditions(expected_sha256, create_only=False)
        async with self._document_locks.hold((granted.space.id, path)):
            return await self._delete_locked(granted, principal, path, expected_sha256)

    async def _delete_locked(
        self, granted: AuthorizedSpace, principal: Principal, path: str, expected_sha256: str
    ) -> Deletion:
        try:
            async for attempt in _on_conflict(MAX_WRITE_ATTEMPTS):
                with attempt:
                    current = await self._repository.get(granted.space.id, path)
                    if current is None:
                        if expected_sha256:
                            _check_etag(path, current, expected_sha256, create_only=False)
                        raise DocumentNotFound(f"no document at {quoted(path)} in this space")
                    _check_etag(path, current, expected_sha256, create_only=False)
                    deletion = DocumentDeletion(
                        space=granted.space,
                        path=path,
                        expected_version=current.version,
                        document_id=current.document_id,
                        sha256=current.sha256,
                        size_bytes=current.size_bytes,
                        at=self._clock(),
                        by=principal.subject,
                        event_id=uuid.uuid4().hex,
                        trace_context=current_trace_context(),
                    )
                    await self._repository.delete(deletion)
                    deleted = current
        except RetryError:
            raise WriteContention(
                f"{quoted(path)} kept changing while it was being deleted; try again"
            ) from None
        self._notifier.changed()
        size = deleted.size_bytes
        await self._credit(granted.space, size, granted.attributed_tenant)
        await self._record_audit(granted, principal, path, -size)
        return Deletion(deleted, size)

    # --- erasure and space administration ----------------------------------------------------

    async def purge(self, principal: Principal, space: SpaceRef, path: str) -> PurgeResult:
        """Erases the document at `path` with every kept version (its chunks follow through
        the PURGE event); refunds its bytes; leaves an audit row (path, never content)."""
        granted = await self._authorize_erasure(principal, space, PURGE_RPC)
        validate_document_path(path)
        async with self._document_locks.hold((granted.space.id, path)):
            result = await self._erase(granted.space, principal, path)
        await self._credit(granted.space, result.live_bytes)
        await self._record_erasure("memory.purge", granted, principal, path, result.live_bytes)
        return PurgeResult(
            purged=result.erased,
            versions_erased=result.versions,
            refunded_bytes=result.live_bytes,
        )

    async def delete_space(
        self, principal: Principal, space: SpaceRef, confirm_space_id: str
    ) -> SpaceDeletion:
        """Erases every document of the space with every kept version (the chunks follow
        through the SPACE_DELETE event) and refunds the bytes erased."""
        granted = await self._authorize_erasure(principal, space, DELETE_SPACE_RPC)
        if confirm_space_id != granted.space.id:
            raise InvalidArgument(
                f"confirm_space_id must be this space's id {granted.space.id!r} "
                "(`engram spaces` lists it)",
                field="confirm_space_id",
            )
        result = await self._erase(granted.space, principal, "")
        # Exactly the bytes erased, not "whatever the counter says": a write racing the
        # erasure has charged its growth before committing, and zeroing the counter would
        # refund it too. Drift the counter had before stays for Reconcile.
        refund = result.live_bytes
        await self._credit(granted.space, refund)
        await self._record_erasure("memory.space_delete", granted, principal, "", refund)
        return SpaceDeletion(
            space_id=granted.space.id,
            documents_erased=result.paths,
            versions_erased=result.versions,
            refunded_bytes=refund,
        )

    async def list_spaces(
        self,
        principal: Principal,
        tenant: str,
        *,
        global_: bool,
        page_size: int,
        page_token: str,
    ) -> Page[SpaceSummary]:
        """A tenant's spaces holding documents (or the global ones), in space id order."""
        if global_:
            if tenant:
                raise InvalidArgument("set tenant or global, not both", field="tenant")
            owner, target = INSTANCE, Target.GLOBAL
        else:
            owner = tenant or principal.tenant
            validate_field("tenant", owner, required=True)
            if owner == INSTANCE:
                raise InvalidArgument(
                    f"tenant {INSTANCE!r} is reserved; set global to list the global spaces",
                    field="tenant",
                )
            target = Target.OWN if owner == principal.tenant else Target.OTHER
        if not admits(RPC_POLICY[LIST_SPACES_RPC][target], principal, target):
            raise PermissionDenied(
                "listing another tenant's spaces needs a platform admin", rule=TENANT_MISMATCH
            )
        limit = SPACES_PAGE.resolve(page_size)
        scope = ("spaces", owner)
        position = decode_page_token(page_token, scope) or {"after": ""}
        found = await self._repository.list_spaces(
            owner, after=str(position["after"]), limit=limit + 1
        )
        items = found[:limit]
        token = ""
        if len(found) > limit:
            token = encode_page_token(scope, {"after": items[-1].space_id})
        return Page(items=items, next_page_token=token)

    async def _authorize_erasure(
        self, principal: Principal, space: SpaceRef, rpc: str
    ) -> AuthorizedSpace:
        """The erasure row of the policy table first (a tenant admin of the space's tenant,
        a platform admin anywhere, never a service), then the mutation rules: stamping and
        the tenant check. A platform admin naming another tenant's space gets it as named
        (stamping would refuse another tenant)."""
        target = rpc_target(principal, space)
        if not admits(RPC_POLICY[rpc][target], principal, target):
            raise PermissionDenied(
                "erasing for good needs an admin of the space's tenant (a service may not)",
                rule=ADMIN_ROLE_REQUIRED,
            )
        if target is Target.OTHER:
            named = space.with_identity(tenant=space.tenant, user=space.user)
            validate_space_ref(named)
            return AuthorizedSpace(space=named)
        return await self._authorize(principal, Action.DELETE, space)

    async def _erase(self, space: SpaceRef, principal: Principal, path: str) -> ErasureResult:
        try:
            async for attempt in _on_conflict(MAX_WRITE_ATTEMPTS):
                with attempt:
                    result = await self._repository.erase(
                        Erasure(
                            space=space,
                            path=path,
                            at=self._clock(),
                            by=principal.subject,
                            event_id=uuid.uuid4().hex,
                            trace_context=current_trace_context(),
                        )
                    )
        except RetryError:
            what = quoted(path) if path else "the space"
            raise WriteContention(
                f"{what} kept changing while it was being erased; try again"
            ) from None
        if result.erased:
            self._notifier.changed()
        return result

    async def _record_erasure(
        self,
        action: str,
        granted: AuthorizedSpace,
        principal: Principal,
        path: str,
        refunded: int,
    ) -> None:
        """Every erasure request leaves a row: who, when (the sink stamps it), which space
        and path, the bytes given back. Never content."""
        await self._audit.record(
            AuditRecord(
                action=action,
                subject=principal.subject,
                tenant=principal.tenant,
                space_id=granted.space.id,
                path=path,
                bytes_delta=-refunded,
            )
        )

    async def begin_import(
        self,
        principal: Principal,
        space: SpaceRef,
        strategy: ImportStrategy,
        *,
        skip_unsupported: bool = False,
    ) -> ImportStream[ImportResult]:
        """Authorizes an import before a byte of it is read; the caller feeds the upload to
        the returned stream, commits it, and closes it whatever happens. With
        `skip_unsupported`, entries engram cannot store are reported, not refused."""
        granted = await self._authorize(principal, Action.IMPORT, space)

        async def commit(entries: list[ArchiveEntry]) -> ImportResult:
            return await self._import_entries(granted, principal, entries, strategy)

        return ImportStream(
            principal,
            self._archive_limits(),
            self._import_budget,
            commit,
            skip_unsupported=skip_unsupported,
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
        stream = await self.begin_import(
            principal, space, strategy, skip_unsupported=skip_unsupported
        )
        try:
            for start in range(0, len(data), FEED_BATCH_BYTES):
                await stream.feed(data[start : start + FEED_BATCH_BYTES])
            return await stream.commit()
        finally:
            stream.close()

    def _archive_limits(self) -> ArchiveLimits:
        return ArchiveLimits(
            max_entries=self._limits.max_import_entries,
            max_doc_bytes=self._limits.max_doc_bytes,
            max_bytes=self._limits.max_import_bytes,
        )

    async def _import_entries(
        self,
        granted: AuthorizedSpace,
        principal: Principal,
        entries: list[ArchiveEntry],
        strategy: ImportStrategy,
    ) -> ImportResult:
        try:
            async for attempt in _on_conflict(IMPORT_ATTEMPTS):
                with attempt:
                    current = await self._repository.get_many(
                        granted.space.id,
                        [entry.path for entry in entries if not entry.unsupported],
                    )
                    outcomes, changes = await self._plan_import(
                        granted.space, entries, current, strategy, principal
                    )
                    delta = sum(
                        change.size_bytes
                        - (current[change.path].size_bytes if change.path in current else 0)
                        for change in changes
                    )
                    if changes:
                        await self._commit(granted, changes, delta)
        except RetryError:
            raise WriteContention(
                "the space kept changing while the archive was imported; try again"
            ) from None
        except Exception:
            attempt.retry_state.outcome = None  # as in _write_locked (issue 29)
            raise
        for change in changes:
            before = current.get(change.path)
            await self._record_audit(
                granted,
                principal,
                change.path,
                change.size_bytes - (before.size_bytes if before else 0),
            )
        return ImportResult(
            entries=outcomes, bytes_written=sum(change.size_bytes for change in changes)
        )

    # --- helpers -----------------------------------------------------------------------------

    async def _authorize(
        self, principal: Principal, action: Action, space: SpaceRef
    ) -> AuthorizedSpace:
        return await self._authorizer.authorize(principal, action, space)

    def _planned(self, current: StoredDocument | None, request: _WriteRequest) -> str:
        """The content a write leaves, decided on `current`; raises if it is refused."""
        _check_etag(request.path, current, request.expected_sha256, request.create_only)
        return self._next_content(current, request.content, request.mode, request.appending)

    def _next_content(
        self,
        current: StoredDocument | None,
        content: str,
        mode: WriteMode,
        appending: Appending = PLAIN_APPEND,
    ) -> str:
        if mode is WriteMode.REPLACE:
            return content
        added = appending.joined(current, content)
        if current is None:
            check_size(utf8_len(added), self._limits.max_doc_bytes)
            check_text(added)
            return added
        check_size(current.size_bytes + utf8_len(added), self._limits.max_doc_bytes)
        check_append(current.content, added)
        return current.content + added

    def _change(
        self,
        space: SpaceRef,
        path: str,
        content: str,
        current: StoredDocument | DocumentHead | None,
        principal: Principal,
        facts: ContentFacts | None = None,
    ) -> DocumentWrite:
        sha256, size_bytes, words = facts or content_facts(content)
        return DocumentWrite(
            space=space,
            path=path,
            content=content,
            sha256=sha256,
            size_bytes=size_bytes,
            word_count=words,
            expected_version=current.version if current else 0,
            document_id=current.document_id if current else str(uuid.uuid4()),
            at=self._clock(),
            by=principal.subject,
            event_id=uuid.uuid4().hex,
            trace_context=current_trace_context(),
        )

    async def _commit(
        self, granted: AuthorizedSpace, changes: Sequence[DocumentWrite], delta: int
    ) -> list[StoredDocument]:
        """Charges growth first and refunds it if the write does not land; credits shrinkage
        after the write (a credit never fails, so it cannot strand a write)."""
        key = uuid.uuid4().hex
        attributed = granted.attributed_tenant
        if delta > 0:
            await self._quota.charge(granted.space, delta, key, attributed_tenant=attributed)
        committed = False
        try:
            if len(changes) == 1:
                stored = [await self._repository.save(changes[0])]
            else:
                stored = await self._repository.save_many(changes)
            committed = True
        finally:
            if not committed and delta > 0:
                await asyncio.shield(
                    self._quota.charge(
                        granted.space, -delta, f"{key}:refund", attributed_tenant=attributed
                    )
                )
        self._notifier.changed()
        if delta < 0:
            await self._credit(granted.space, -delta, attributed)
        return stored

    async def _credit(self, space: SpaceRef, size_bytes: int, attributed_tenant: str = "") -> None:
        if size_bytes > 0:
            await self._quota.charge(
                space, -size_bytes, uuid.uuid4().hex, attributed_tenant=attributed_tenant
            )

    async def _record_audit(
        self, granted: AuthorizedSpace, principal: Principal, path: str, delta: int
    ) -> None:
        if granted.audit_action:
            await self._audit.record(
                AuditRecord(
                    action=granted.audit_action,
                    subject=principal.subject,
                    tenant=principal.tenant,
                    space_id=granted.space.id,
                    path=path,
                    bytes_delta=delta,
                )
            )

    async def _plan_import(
        self,
        space: SpaceRef,
        entries: Sequence[ArchiveEntry],
        current: dict[str, StoredDocument],
        strategy: ImportStrategy,
        principal: Principal,
    ) -> tuple[list[ImportedEntry], list[DocumentWrite]]:
        outcomes: list[ImportedEntry] = []
        changes: list[DocumentWrite] = []
        taken = set(current) | {entry.path for entry in entries if not entry.unsupported}
        # Hashing and counting 100s of MiB is CPU work: off the event loop.
        facts = await asyncio.to_thread(lambda: [content_facts(e.content) for e in entries])
        for entry, fact in zip(entries, facts, strict=True):
            if entry.unsupported:
                outcomes.append(
                    ImportedEntry(entry.path, "", ImportOutcome.UNSUPPORTED, entry.unsupported)
                )
                continue
            existing = current.get(entry.path)
            if existing is None:
                changes.append(
                    self._change(space, entry.path, entry.content, None, principal, fact)
                )
                outcomes.append(ImportedEntry(entry.path, entry.path, ImportOutcome.CREATED))
            elif existing.content == entry.content:
                outcomes.append(ImportedEntry(entry.path, entry.path, ImportOutcome.UNCHANGED))
            elif strategy is ImportStrategy.SKIP:
                outcomes.append(ImportedEntry(entry.path, "", ImportOutcome.SKIPPED))
            elif strategy is ImportStrategy.OVERWRITE:
                changes.append(
                    self._change(space, entry.path, entry.content, existing, principal, fact)
                )
                outcomes.append(ImportedEntry(entry.path, entry.path, ImportOutcome.OVERWRITTEN))
            else:
                target = await self._free_path(space, entry.path, taken)
                taken.add(target)
                changes.append(self._change(space, target, entry.content, None, principal, fact))
                outcomes.append(ImportedEntry(entry.path, target, ImportOutcome.RENAMED))
        return outcomes, changes

    async def _free_path(self, space: SpaceRef, path: str, taken: set[str]) -> str:
        """The first `name-N.md` that is neither stored nor claimed by the archive."""
        for attempt in range(2, MAX_RENAME_ATTEMPTS):
            candidate = renamed_path(path, attempt)
            if candidate in taken:
                continue
            try:
                validate_document_path(candidate)
            except InvalidArgument:
                break
            if await self._repository.get(space.id, candidate) is None:
                return candidate
            taken.add(candidate)
        raise InvalidArgument(
            f"no free name to rename {quoted(path)} to; import it with another strategy",
            field="data",
        )


@dataclass(frozen=True, slots=True)
class _WriteRequest:
    """What a WriteDocument asks for, once validated."""

    path: str
    content: str
    mode: WriteMode
    expected_sha256: str
    create_only: bool
    appending: Appending


ContentFacts = tuple[str, int, int]


def content_facts(content: str) -> ContentFacts:
    """(sha256, UTF-8 bytes, words) of a document's content."""
    return sha256_hex(content), utf8_len(content), word_count(content)


def _validate_preconditions(expected_sha256: str, create_only: bool) -> None:
    if expected_sha256 and not SHA256_HEX.fullmatch(expected_sha256):
        raise InvalidArgument(
            "expected_sha256 must be 64 lower-case hex characters (a Document's sha256)",
            field="expected_sha256",
        )
    if expected_sha256 and create_only:
        raise InvalidArgument(
            "expected_sha256 and create_only contradict each other; set one",
            field="create_only",
        )


def _check_etag(
    path: str,
    current: StoredDocument | DocumentHead | None,
    expected_sha256: str,
    create_only: bool,
) -> None:
    if create_only and current is not None:
        raise EtagMismatch(
            f"{quoted(path)} already exists (sha256 {current.sha256}); "
            "create_only refused to replace it",
            current_sha256=current.sha256,
            subject=path,
        )
    if not expected_sha256:
        return
    if current is None:
        raise EtagMismatch(
            f"{quoted(path)} does not exist, so it cannot have sha256 {expected_sha256}",
            current_sha256="",
            subject=path,
        )
    if current.sha256 != expected_sha256:
        raise EtagMismatch(
            f"{quoted(path)} changed: its current sha256 is {current.sha256}, not "
            f"{expected_sha256}; re-read it and retry",
            current_sha256=current.sha256,
            subject=path,
        )


def _file_item(entry: PathEntry) -> DirectoryItem:
    return DirectoryItem(
        path=entry.path, is_dir=False, size_bytes=entry.size_bytes, updated_at=entry.updated_at
    )


def _archive_batch(writer: ArchiveWriter, batch: Sequence[StoredDocument]) -> bytes:
    return b"".join(writer.add(doc.path, doc.content, doc.updated_at) for doc in batch)


def _document_at(
    space: SpaceRef, path: str, kept: DocumentVersion, current: StoredDocument | None
) -> StoredDocument:
    """A kept version presented as a document (created_at from the current one if alive)."""
    created = (
        current.created_at
        if current and current.document_id == kept.document_id
        else (kept.updated_at)
    )
    return StoredDocument(
        space=space,
        path=path,
        content=kept.content,
        sha256=kept.sha256,
        size_bytes=kept.size_bytes,
        word_count=word_count(kept.content),
        version=kept.version,
        document_id=kept.document_id,
        created_at=created,
        updated_at=kept.updated_at,
        updated_by=kept.updated_by,
    )
