"""What every storage room shares: the value types the use cases answer, the ports they
talk to (`StorageCore`), and the rules of a conditional commit (etags, charging, retries)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Generic, TypeVar

from tenacity import (
    AsyncRetrying,
    AttemptManager,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from engram.domain.content import sha256_hex, word_count
from engram.domain.documents import DocumentHead, DocumentWrite, StoredDocument
from engram.domain.errors import EtagMismatch, InvalidArgument, quoted
from engram.domain.policy import Target
from engram.domain.ports import AuditRecord, AuditSink, AuthorizedSpace, Authorizer
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.domain.text_rules import utf8_len
from engram.runtime.keyed_locks import KeyedLocks
from engram.runtime.tracing import current_trace_context
from engram.storage.ports import (
    ChangeNotifier,
    ConcurrentModification,
    DocumentRepository,
    QuotaGate,
)

T = TypeVar("T")

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_WRITE_ATTEMPTS = 100


class WriteMode(StrEnum):
    REPLACE = "replace"
    APPEND = "append"


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
class Page(Generic[T]):
    items: list[T]
    next_page_token: str


def utc_now() -> datetime:
    """Now, to the millisecond: the precision every backend stores (BSON dates)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


async def on_conflict(attempts: int) -> AsyncIterator[AttemptManager]:
    """Retries a read-check-commit step that lost a race (ConcurrentModification), at most
    `attempts` times in all. Full jitter from 1 ms, capped at 50 ms: spreads racing writers
    apart quickly without long stalls. Exhausted, it raises RetryError.

    Any other failure passes through, and the retry state forgets it first: tenacity's state
    is a reference cycle of its own, and the failure's traceback holds the caller's frames
    (a refused write's content, an import's archive) until a full collection (issue 29)."""
    retrying = AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.001, max=0.05),
        retry=retry_if_exception_type(ConcurrentModification),
    )
    attempt: AttemptManager | None = None
    try:
        async for attempt in retrying:
            yield attempt
    except BaseException:
        if attempt is not None:
            attempt.retry_state.outcome = None
        raise


ContentFacts = tuple[str, int, int]


def content_facts(content: str) -> ContentFacts:
    """(sha256, UTF-8 bytes, words) of a document's content."""
    return sha256_hex(content), utf8_len(content), word_count(content)


def validate_preconditions(expected_sha256: str, create_only: bool) -> None:
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


def check_etag(
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


class StorageCore:
    """The ports every room talks to, the per-document locks they share, and the commit
    steps (charge, save, refund or credit, notify, audit) every change goes through."""

    def __init__(
        self,
        repository: DocumentRepository,
        quota: QuotaGate,
        authorizer: Authorizer,
        audit: AuditSink,
        notifier: ChangeNotifier,
        limits: DocumentLimits,
        clock: Callable[[], datetime],
    ) -> None:
        self.repository = repository
        self.quota = quota
        self.authorizer = authorizer
        self.audit = audit
        self.notifier = notifier
        self.limits = limits
        self.clock = clock
        self.document_locks = KeyedLocks()

    async def authorize(
        self, principal: Principal, action: Action, space: SpaceRef
    ) -> AuthorizedSpace:
        return await self.authorizer.authorize(principal, action, space)

    async def permits(self, principal: Principal, action: Action, target: Target) -> bool:
        return await self.authorizer.permits(principal, action, target)

    def change(
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
            at=self.clock(),
            by=principal.subject,
            event_id=uuid.uuid4().hex,
            trace_context=current_trace_context(),
        )

    async def commit(
        self, granted: AuthorizedSpace, changes: Sequence[DocumentWrite], delta: int
    ) -> list[StoredDocument]:
        """Charges growth first and refunds it if the write does not land; credits shrinkage
        after the write (a credit never fails, so it cannot strand a write)."""
        key = uuid.uuid4().hex
        attributed = granted.attributed_tenant
        if delta > 0:
            await self.quota.charge(granted.space, delta, key, attributed_tenant=attributed)
        committed = False
        try:
            if len(changes) == 1:
                stored = [await self.repository.save(changes[0])]
            else:
                stored = await self.repository.save_many(changes)
            committed = True
        finally:
            if not committed and delta > 0:
                await asyncio.shield(
                    self.quota.charge(
                        granted.space, -delta, f"{key}:refund", attributed_tenant=attributed
                    )
                )
        self.notifier.changed()
        if delta < 0:
            await self.credit(granted.space, -delta, attributed)
        return stored

    async def credit(self, space: SpaceRef, size_bytes: int, attributed_tenant: str = "") -> None:
        """Refunds `size_bytes` (a global space's change stays attributed to its tenant)."""
        if size_bytes > 0:
            await self.quota.charge(
                space, -size_bytes, uuid.uuid4().hex, attributed_tenant=attributed_tenant
            )

    async def record_audit(
        self, granted: AuthorizedSpace, principal: Principal, path: str, delta: int
    ) -> None:
        """The audit row of a global mutation (the decision names its action)."""
        if granted.audit_action:
            await self.audit.record(
                AuditRecord(
                    action=granted.audit_action,
                    subject=principal.subject,
                    tenant=principal.tenant,
                    space_id=granted.space.id,
                    path=path,
                    bytes_delta=delta,
                )
            )
