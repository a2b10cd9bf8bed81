"""The versions room: a kept version read back as a document, and a path's history."""

from __future__ import annotations

from engram.domain.content import word_count
from engram.domain.documents import DocumentVersion, StoredDocument
from engram.domain.errors import DocumentNotFound, InvalidArgument, VersionNotFound, quoted
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token
from engram.domain.paths import validate_document_path
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.storage.rooms.core import Page, StorageCore

VERSIONS_PAGE = PageSize(default=50, maximum=1000)


class DocumentVersions:
    def __init__(self, core: StorageCore) -> None:
        self._core = core

    async def read(
        self, principal: Principal, space: SpaceRef, path: str, *, version: int
    ) -> tuple[StoredDocument, DocumentVersion | None]:
        """The document as it was at `version` (positive), and that kept version; the current
        document and None when `version` is the current one."""
        granted = await self._core.authorize(principal, Action.READ, space)
        validate_document_path(path)
        if version < 0:
            raise InvalidArgument("version must be 0 (current) or positive", field="version")
        repository = self._core.repository
        current = await repository.get(granted.space.id, path)
        if version == 0 or (current is not None and current.version == version):
            if current is None:
                raise DocumentNotFound(f"no document at {quoted(path)} in this space")
            return current, None
        kept = await repository.get_version(granted.space.id, path, version)
        if kept is None:
            raise VersionNotFound(
                f"version {version} of {quoted(path)} is not kept (see ListDocumentVersions)"
            )
        return _document_at(granted.space, path, kept, current), kept

    async def list_versions(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        *,
        page_size: int,
        page_token: str,
    ) -> Page[DocumentVersion]:
        granted = await self._core.authorize(principal, Action.READ, space)
        validate_document_path(path)
        limit = VERSIONS_PAGE.resolve(page_size)
        scope = ("versions", granted.space.id, path)
        position = decode_page_token(page_token, scope)
        versions: list[DocumentVersion] = []
        before_seq: int | None = None
        if position is None:
            current = await self._core.repository.get(granted.space.id, path)
            if current is not None:
                versions.append(_current_version(current))
        else:
            before_seq = int(position["before"])
        kept = await self._core.repository.list_versions(
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


def _current_version(current: StoredDocument) -> DocumentVersion:
    return DocumentVersion(
        document_id=current.document_id,
        version=current.version,
        sha256=current.sha256,
        size_bytes=current.size_bytes,
        updated_at=current.updated_at,
        updated_by=current.updated_by,
        current=True,
    )


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
