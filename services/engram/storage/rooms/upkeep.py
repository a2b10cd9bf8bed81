"""The upkeep room: what other services need of the stored documents to do their own work
(QuotaService's usage reports, the maintenance worker's walk, scans and version pruning),
so that they reach storage's data through its RPCs, never its collections. Service
principals only (each action's row in the policy table)."""

from __future__ import annotations

from engram.domain.documents import PathEntry, SpaceUsage, StoredDocument
from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.policy import SERVICE_PRINCIPAL_REQUIRED, Target
from engram.domain.principals import Action, Principal
from engram.domain.quotas import INSTANCE
from engram.domain.spaces import SpaceRef, parse_space_id, validate_field
from engram.storage.rooms.core import Page, StorageCore

SPACES_PAGE = PageSize(default=100, maximum=1000)
SCAN_PAGE = PageSize(default=100, maximum=1000)
# A scan's page ends once it holds this much content (after its first document): pages of
# maximum-size documents stay under the gRPC message limit, and a scan reads one page's.
SCAN_PAGE_BYTES = 1024 * 1024


class Upkeep:
    def __init__(self, core: StorageCore) -> None:
        self._core = core

    async def stored_usage(self, principal: Principal, space_id: str) -> SpaceUsage:
        """Bytes and documents stored in the space, from the documents alone (no quota
        counter: QuotaService asks this to report a space)."""
        granted = await self._core.authorize(
            principal, Action.STORED_USAGE, parse_space_id(space_id)
        )
        return await self._core.repository.space_usage(granted.space.id)

    async def sum_usage(
        self, principal: Principal, tenant: str, *, global_: bool
    ) -> dict[str, int]:
        """Bytes stored per space of a tenant (or of the global spaces), in one aggregate:
        what QuotaService's Reconcile corrects its counters to."""
        if global_:
            if tenant:
                raise InvalidArgument("set tenant or global, not both", field="tenant")
            owner, target = INSTANCE, Target.GLOBAL
        else:
            validate_field("tenant", tenant, required=True)
            if tenant == INSTANCE:
                raise InvalidArgument(
                    f"tenant {INSTANCE!r} is reserved; set global to sum the global spaces",
                    field="tenant",
                )
            owner = tenant
            target = Target.OWN if tenant == principal.tenant else Target.OTHER
        if not await self._core.permits(principal, Action.STORED_USAGE, target):
            raise PermissionDenied(
                "summing stored usage is for service principals", rule=SERVICE_PRINCIPAL_REQUIRED
            )
        return await self._core.repository.usage_by_space(owner)

    async def prune_versions(self, principal: Principal, space: SpaceRef) -> int:
        """Erases the space's kept versions beyond the retention; returns how many."""
        granted = await self._core.authorize(principal, Action.PRUNE_VERSIONS, space)
        return await self._core.repository.prune_versions(granted.space.id)

    async def all_spaces(
        self, principal: Principal, *, page_size: int, page_token: str
    ) -> Page[SpaceRef]:
        """Every space holding documents, of every tenant and the global ones, in id order."""
        if not await self._core.permits(principal, Action.LIST_ALL_SPACES, Target.INSTANCE):
            raise PermissionDenied(
                "listing every space is for service principals", rule=SERVICE_PRINCIPAL_REQUIRED
            )
        limit = SPACES_PAGE.resolve(page_size)
        scope = ("all_spaces",)
        position = decode_page_token(page_token, scope) or {"after": ""}
        found = await self._core.repository.all_spaces(
            after=str(position["after"]), limit=limit + 1
        )
        items = found[:limit]
        token = encode_page_token(scope, {"after": items[-1].id}) if len(found) > limit else ""
        return Page(items=items, next_page_token=token)

    async def scan_documents(
        self, principal: Principal, space: SpaceRef, *, page_size: int, page_token: str
    ) -> Page[StoredDocument]:
        """A page of the space's live documents with their content, in path order."""
        granted = await self._core.authorize(principal, Action.SCAN_DOCUMENTS, space)
        limit = SCAN_PAGE.resolve(page_size)
        scope = ("scan", granted.space.id)
        position = decode_page_token(page_token, scope) or {"after": ""}
        repository = self._core.repository
        listed = await repository.list_paths(
            granted.space.id,
            directory="",
            start=str(position["after"]),
            inclusive=False,
            limit=limit + 1,
        )
        # Only the page's content is read (the listing gives each document's size).
        page: list[PathEntry] = []
        held = 0
        for entry in listed[:limit]:
            if page and held >= SCAN_PAGE_BYTES:
                break
            page.append(entry)
            held += entry.size_bytes
        found = await repository.get_many(granted.space.id, [entry.path for entry in page])
        # A document deleted since the listing is left out.
        items = [found[entry.path] for entry in page if entry.path in found]
        more = len(page) < len(listed)
        token = encode_page_token(scope, {"after": page[-1].path}) if more else ""
        return Page(items=items, next_page_token=token)
