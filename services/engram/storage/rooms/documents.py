"""The documents room: read the current document, list a directory, report usage, write
and delete. Writes are optimistic: read the current version, charge the quota for growth,
write conditionally on that version, and on a lost race refund and retry."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from tenacity import RetryError

from engram.domain.content import check_append, check_size, check_text
from engram.domain.documents import DocumentDeletion, DocumentHead, PathEntry, StoredDocument
from engram.domain.errors import (
    DocumentNotFound,
    EngramError,
    EtagMismatch,
    InvalidArgument,
    WriteContention,
    quoted,
)
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.paths import directory_upper_bound, validate_directory, validate_document_path
from engram.domain.ports import AuthorizedSpace, UsageReport
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.domain.text_rules import utf8_len
from engram.runtime.tracing import current_trace_context
from engram.storage.rooms.core import (
    MAX_WRITE_ATTEMPTS,
    ContentFacts,
    Page,
    StorageCore,
    WriteMode,
    WriteResult,
    check_etag,
    content_facts,
    on_conflict,
    validate_preconditions,
)

LIST_PAGE = PageSize(default=100, maximum=1000)


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
class SpaceUsageReport:
    used_bytes: int
    quota_bytes: int
    tenant_used_bytes: int
    tenant_quota_bytes: int
    document_count: int


@dataclass(frozen=True, slots=True)
class _WriteRequest:
    """What a WriteDocument asks for, once validated."""

    path: str
    content: str
    mode: WriteMode
    expected_sha256: str
    create_only: bool
    appending: Appending


class DocumentReads:
    """The current document, a directory's listing, a space's usage."""

    def __init__(self, core: StorageCore) -> None:
        self._core = core

    async def read(self, principal: Principal, space: SpaceRef, path: str) -> StoredDocument:
        granted = await self._core.authorize(principal, Action.READ, space)
        validate_document_path(path)
        current = await self._core.repository.get(granted.space.id, path)
        if current is None:
            raise DocumentNotFound(f"no document at {quoted(path)} in this space")
        return current

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
        granted = await self._core.authorize(principal, Action.LIST, space)
        validate_directory(directory)
        limit = LIST_PAGE.resolve(page_size)
        scope = ("list", granted.space.id, directory, str(recursive))
        position = decode_page_token(page_token, scope) or {"start": "", "inclusive": True}
        start, inclusive = str(position["start"]), bool(position["inclusive"])
        prefix_len = len(directory) + 1 if directory else 0
        repository = self._core.repository
        items: list[DirectoryItem] = []
        exhausted = False
        while len(items) < limit and not exhausted:
            wanted = limit - len(items)
            batch = await repository.list_paths(
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
            probe = await repository.list_paths(
                granted.space.id, directory=directory, start=start, inclusive=inclusive, limit=1
            )
            more = bool(probe)
        token = encode_page_token(scope, {"start": start, "inclusive": inclusive}) if more else ""
        return Page(items=items, next_page_token=token)

    async def usage(self, principal: Principal, space: SpaceRef) -> SpaceUsageReport:
        granted = await self._core.authorize(principal, Action.USAGE, space)
        report: UsageReport = await self._core.quota.usage(granted.space)
        stored = await self._core.repository.space_usage(granted.space.id)
        return SpaceUsageReport(
            used_bytes=report.space_used_bytes,
            quota_bytes=report.space_quota_bytes,
            tenant_used_bytes=report.aggregate_used_bytes,
            tenant_quota_bytes=report.aggregate_quota_bytes,
            document_count=stored.document_count,
        )


class DocumentWrites:
    """Writes (replace, append) and deletes, one document at a time under its lock."""

    def __init__(self, core: StorageCore) -> None:
        self._core = core

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
        granted = await self._core.authorize(principal, Action.WRITE, space)
        validate_document_path(path)
        validate_preconditions(expected_sha256, create_only)
        if mode is WriteMode.REPLACE:
            if appending != PLAIN_APPEND:
                raise InvalidArgument(
                    "append_as_line and prefix_if_created go with WRITE_MODE_APPEND only",
                    field="mode",
                )
            check_size(utf8_len(content), self._core.limits.max_doc_bytes)
            check_text(content)
        elif not content:
            raise InvalidArgument("append needs non-empty content", field="content")
        request = _WriteRequest(path, content, mode, expected_sha256, create_only, appending)
        async with self._core.document_locks.hold((granted.space.id, path)):
            return await self._write_locked(granted, principal, request)

    async def _write_locked(
        self, granted: AuthorizedSpace, principal: Principal, request: _WriteRequest
    ) -> WriteResult:
        try:
            async for attempt in on_conflict(MAX_WRITE_ATTEMPTS):
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
        if committed:
            await self._core.record_audit(granted, principal, request.path, result.bytes_delta)
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
        repository = self._core.repository
        current = await repository.get(space_id, path, trust_head=trusted)
        try:
            new_content = self._planned(current, request)
            commits = current is None or new_content != current.content
        except EngramError:
            if not trusted:
                raise
            commits = False
        if trusted and not commits:
            current = await repository.get(space_id, path)
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
        head = await self._core.repository.head(granted.space.id, path)
        facts = content_facts(content)
        if head is not None and head.sha256 == facts[0]:
            return None
        try:
            check_etag(path, head, request.expected_sha256, request.create_only)
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
        change = self._core.change(granted.space, path, content, current, principal, facts)
        delta = change.size_bytes - (current.size_bytes if current else 0)
        stored = await self._core.commit(granted, [change], delta)
        return WriteResult(stored[0], created=current is None, bytes_delta=delta)

    def _planned(self, current: StoredDocument | None, request: _WriteRequest) -> str:
        """The content a write leaves, decided on `current`; raises if it is refused."""
        check_etag(request.path, current, request.expected_sha256, request.create_only)
        if request.mode is WriteMode.REPLACE:
            return request.content
        max_doc_bytes = self._core.limits.max_doc_bytes
        added = request.appending.joined(current, request.content)
        if current is None:
            check_size(utf8_len(added), max_doc_bytes)
            check_text(added)
            return added
        check_size(current.size_bytes + utf8_len(added), max_doc_bytes)
        check_append(current.content, added)
        return current.content + added

    async def delete_document(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str = ""
    ) -> Deletion:
        """Deletes the document (keeping its content as a version); answers it and its size."""
        granted = await self._core.authorize(principal, Action.DELETE, space)
        validate_document_path(path)
        validate_preconditions(expected_sha256, create_only=False)
        async with self._core.document_locks.hold((granted.space.id, path)):
            return await self._delete_locked(granted, principal, path, expected_sha256)

    async def _delete_locked(
        self, granted: AuthorizedSpace, principal: Principal, path: str, expected_sha256: str
    ) -> Deletion:
        try:
            async for attempt in on_conflict(MAX_WRITE_ATTEMPTS):
                with attempt:
                    deleted = await self._delete_once(granted, principal, path, expected_sha256)
        except RetryError:
            raise WriteContention(
                f"{quoted(path)} kept changing while it was being deleted; try again"
            ) from None
        self._core.notifier.changed()
        size = deleted.size_bytes
        await self._core.credit(granted.space, size, granted.attributed_tenant)
        await self._core.record_audit(granted, principal, path, -size)
        return Deletion(deleted, size)

    async def _delete_once(
        self, granted: AuthorizedSpace, principal: Principal, path: str, expected_sha256: str
    ) -> StoredDocument:
        current = await self._core.repository.get(granted.space.id, path)
        if current is None:
            if expected_sha256:
                check_etag(path, current, expected_sha256, create_only=False)
            raise DocumentNotFound(f"no document at {quoted(path)} in this space")
        check_etag(path, current, expected_sha256, create_only=False)
        await self._core.repository.delete(
            DocumentDeletion(
                space=granted.space,
                path=path,
                expected_version=current.version,
                document_id=current.document_id,
                sha256=current.sha256,
                size_bytes=current.size_bytes,
                at=self._core.clock(),
                by=principal.subject,
                event_id=uuid.uuid4().hex,
                trace_context=current_trace_context(),
            )
        )
        return current


def _file_item(entry: PathEntry) -> DirectoryItem:
    return DirectoryItem(
        path=entry.path, is_dir=False, size_bytes=entry.size_bytes, updated_at=entry.updated_at
    )
