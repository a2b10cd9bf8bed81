"""The catalog room: every live document of every space, as (space_id, path), a page at a
time. The indexer lists it for backfills and reindexes of every space through
ListAllDocuments, so it never reads storage's database itself. Engram's own services only
(Action.LIST_ALL_DOCUMENTS): the listing crosses every tenant."""

from __future__ import annotations

from engram.domain.errors import PermissionDenied
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.policy import SERVICE_PRINCIPAL_REQUIRED, Target
from engram.domain.principals import Action, Principal
from engram.storage.rooms.core import Page, StorageCore

CATALOG_PAGE = PageSize(default=1000, maximum=5000)
_SCOPE = ("all_documents",)


class DocumentCatalog:
    def __init__(self, core: StorageCore) -> None:
        self._core = core

    async def list_all(
        self, principal: Principal, *, page_size: int, page_token: str
    ) -> Page[tuple[str, str]]:
        """(space_id, path) of every live document, in that order, one page."""
        if not await self._core.permits(principal, Action.LIST_ALL_DOCUMENTS, Target.INSTANCE):
            raise PermissionDenied(
                "listing every document is for engram's services (the indexer) only",
                rule=SERVICE_PRINCIPAL_REQUIRED,
            )
        limit = CATALOG_PAGE.resolve(page_size)
        position = decode_page_token(page_token, _SCOPE) or {"space_id": "", "path": ""}
        after = (str(position["space_id"]), str(position["path"]))
        found = await self._core.repository.all_paths(after=after, limit=limit + 1)
        items = found[:limit]
        token = ""
        if len(found) > limit:
            space_id, path = items[-1]
            token = encode_page_token(_SCOPE, {"space_id": space_id, "path": path})
        return Page(items=items, next_page_token=token)
