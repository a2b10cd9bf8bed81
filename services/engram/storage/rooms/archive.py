"""The archive room: a space exported as a gzipped tar, and an archive imported into one
(every entry validated before anything is written, all of it committed at once)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from tenacity import RetryError

from engram.domain.documents import DocumentWrite, StoredDocument, byte_groups
from engram.domain.errors import InvalidArgument, WriteContention, quoted
from engram.domain.paths import renamed_path, validate_document_path
from engram.domain.ports import AuthorizedSpace
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.storage.archive import ArchiveEntry, ArchiveLimits, ArchiveWriter
from engram.storage.imports import FEED_BATCH_BYTES, ImportStream, InFlightBudget
from engram.storage.rooms.core import ContentFacts, StorageCore, content_facts, on_conflict

# Paths listed per read of the space's listing, and the content read (and archived) at once:
# an export holds at most one group of documents (or one document larger than it), whatever
# the space's size or its documents' sizes (up to ENGRAM_MAX_DOC_BYTES each).
EXPORT_BATCH = 200
EXPORT_GROUP_BYTES = 4 * 1024 * 1024
IMPORT_ATTEMPTS = 5
MAX_RENAME_ATTEMPTS = 1000


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


class SpaceArchives:
    def __init__(self, core: StorageCore) -> None:
        self._core = core
        self._import_budget = InFlightBudget(core.limits.max_import_inflight_bytes)

    async def export(self, principal: Principal, space: SpaceRef) -> AsyncGenerator[bytes, None]:
        """Yields a gzipped tar of the space, document by document (authorized up front)."""
        granted = await self._core.authorize(principal, Action.EXPORT, space)
        return self._export_chunks(granted.space)

    async def _export_chunks(self, space: SpaceRef) -> AsyncGenerator[bytes, None]:
        writer = ArchiveWriter()
        repository = self._core.repository
        after = ""
        while True:
            listed = await repository.list_paths(
                space.id, directory="", start=after, inclusive=False, limit=EXPORT_BATCH
            )
            if not listed:
                break
            for group in byte_groups(listed, EXPORT_GROUP_BYTES):
                found = await repository.get_many(space.id, [entry.path for entry in group])
                # A document deleted since the listing is left out; one changed since is
                # exported as it is now.
                batch = [found[entry.path] for entry in group if entry.path in found]
                data = await asyncio.to_thread(_archive_batch, writer, batch)
                del found, batch
                if data:
                    yield data
            after = listed[-1].path
        tail = await asyncio.to_thread(writer.close)
        if tail:
            yield tail

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
        granted = await self._core.authorize(principal, Action.IMPORT, space)

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
        limits = self._core.limits
        return ArchiveLimits(
            max_entries=limits.max_import_entries,
            max_doc_bytes=limits.max_doc_bytes,
            max_bytes=limits.max_import_bytes,
        )

    async def _import_entries(
        self,
        granted: AuthorizedSpace,
        principal: Principal,
        entries: list[ArchiveEntry],
        strategy: ImportStrategy,
    ) -> ImportResult:
        try:
            async for attempt in on_conflict(IMPORT_ATTEMPTS):
                with attempt:
                    current = await self._core.repository.get_many(
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
                        await self._core.commit(granted, changes, delta)
        except RetryError:
            raise WriteContention(
                "the space kept changing while the archive was imported; try again"
            ) from None
        for change in changes:
            before = current.get(change.path)
            await self._core.record_audit(
                granted,
                principal,
                change.path,
                change.size_bytes - (before.size_bytes if before else 0),
            )
        return ImportResult(
            entries=outcomes, bytes_written=sum(change.size_bytes for change in changes)
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
            outcome, change = await self._plan_entry(
                space, entry, current.get(entry.path), strategy, principal, fact, taken
            )
            outcomes.append(outcome)
            if change is not None:
                changes.append(change)
        return outcomes, changes

    async def _plan_entry(
        self,
        space: SpaceRef,
        entry: ArchiveEntry,
        existing: StoredDocument | None,
        strategy: ImportStrategy,
        principal: Principal,
        fact: ContentFacts,
        taken: set[str],
    ) -> tuple[ImportedEntry, DocumentWrite | None]:
        """What importing one entry does: its outcome, and the change to commit if any."""
        path, content = entry.path, entry.content
        if entry.unsupported:
            return ImportedEntry(path, "", ImportOutcome.UNSUPPORTED, entry.unsupported), None
        if existing is None:
            change = self._core.change(space, path, content, None, principal, fact)
            return ImportedEntry(path, path, ImportOutcome.CREATED), change
        if existing.content == content:
            return ImportedEntry(path, path, ImportOutcome.UNCHANGED), None
        if strategy is ImportStrategy.SKIP:
            return ImportedEntry(path, "", ImportOutcome.SKIPPED), None
        if strategy is ImportStrategy.OVERWRITE:
            change = self._core.change(space, path, content, existing, principal, fact)
            return ImportedEntry(path, path, ImportOutcome.OVERWRITTEN), change
        target = await self._free_path(space, path, taken)
        taken.add(target)
        change = self._core.change(space, target, content, None, principal, fact)
        return ImportedEntry(path, target, ImportOutcome.RENAMED), change

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
            if await self._core.repository.get(space.id, candidate) is None:
                return candidate
            taken.add(candidate)
        raise InvalidArgument(
            f"no free name to rename {quoted(path)} to; import it with another strategy",
            field="data",
        )


def _archive_batch(writer: ArchiveWriter, batch: Sequence[StoredDocument]) -> bytes:
    return b"".join(writer.add(doc.path, doc.content, doc.updated_at) for doc in batch)
