"""The erasure room: a document or a whole space erased for good (no version kept, bytes
refunded, an audit row for each), and the listing of a tenant's spaces that names them.
Who may erase is the Authorizer's call (Action.PURGE, Action.DELETE_SPACE): a tenant admin
of the space's tenant, a platform admin anywhere (the space taken as named), never a
service."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tenacity import RetryError

from engram.domain.documents import Erasure, ErasureResult, SpaceSummary
from engram.domain.errors import InvalidArgument, PermissionDenied, WriteContention, quoted
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.paths import validate_document_path
from engram.domain.policy import TENANT_MISMATCH, Target
from engram.domain.ports import AuditRecord, AuthorizedSpace
from engram.domain.principals import Action, Principal
from engram.domain.quotas import INSTANCE
from engram.domain.spaces import SpaceRef, validate_field
from engram.runtime.tracing import current_trace_context
from engram.storage.rooms.core import MAX_WRITE_ATTEMPTS, Page, StorageCore, on_conflict

SPACES_PAGE = PageSize(default=100, maximum=1000)


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


class Erasures:
    def __init__(self, core: StorageCore) -> None:
        self._core = core

    async def purge(self, principal: Principal, space: SpaceRef, path: str) -> PurgeResult:
        """Erases the document at `path` with every kept version (its chunks follow through
        the PURGE event); refunds its bytes; leaves an audit row (path, never content)."""
        granted = await self._core.authorize(principal, Action.PURGE, space)
        validate_document_path(path)
        async with self._core.document_locks.hold((granted.space.id, path)):
            result = await self._erase(granted.space, principal, path)
        await self._core.credit(granted.space, result.live_bytes)
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
        granted = await self._core.authorize(principal, Action.DELETE_SPACE, space)
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
        await self._core.credit(granted.space, refund)
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
        if not await self._core.permits(principal, Action.LIST_SPACES, target):
            raise PermissionDenied(
                "listing another tenant's spaces needs a platform admin", rule=TENANT_MISMATCH
            )
        limit = SPACES_PAGE.resolve(page_size)
        scope = ("spaces", owner)
        position = decode_page_token(page_token, scope) or {"after": ""}
        found = await self._core.repository.list_spaces(
            owner, after=str(position["after"]), limit=limit + 1
        )
        items = found[:limit]
        token = ""
        if len(found) > limit:
            token = encode_page_token(scope, {"after": items[-1].space_id})
        return Page(items=items, next_page_token=token)

    async def _erase(self, space: SpaceRef, principal: Principal, path: str) -> ErasureResult:
        try:
            async for attempt in on_conflict(MAX_WRITE_ATTEMPTS):
                with attempt:
                    result = await self._core.repository.erase(
                        Erasure(
                            space=space,
                            path=path,
                            at=self._core.clock(),
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
            self._core.notifier.changed()
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
        await self._core.audit.record(
            AuditRecord(
                action=action,
                subject=principal.subject,
                tenant=principal.tenant,
                space_id=granted.space.id,
                path=path,
                bytes_delta=-refunded,
            )
        )
