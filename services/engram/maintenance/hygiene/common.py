"""What every hygiene job shares: its schedule (one interval, every space) and the scans
of a space's documents a page at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from engram.domain.documents import PathEntry, StoredDocument
from engram.domain.maintenance import MAX_RUN_DETAILS, SpaceSettings
from engram.maintenance.ports import MaintenanceDeps
from engram.storage.ports import DocumentRepository

# Documents read at a time by a scan (paths and sizes; whole documents for the content
# scans, whose pages a maximum-size document makes large).
PATH_PAGE = 1000
DOCUMENT_PAGE = 100


class HygieneJob:
    """A job run on every space, once per `interval`."""

    def __init__(self, deps: MaintenanceDeps, interval: timedelta) -> None:
        self._deps = deps
        self._interval = interval

    def scheduled(self, settings: SpaceSettings) -> bool:
        return True

    def interval(self, settings: SpaceSettings) -> timedelta:
        return self._interval


async def path_entries(
    repository: DocumentRepository, space_id: str, directory: str = ""
) -> AsyncIterator[PathEntry]:
    """Every live document under `directory` ('' = all), in path order."""
    start, inclusive = "", True
    while True:
        page = await repository.list_paths(
            space_id, directory=directory, start=start, inclusive=inclusive, limit=PATH_PAGE
        )
        for entry in page:
            yield entry
        if len(page) < PATH_PAGE:
            return
        start, inclusive = page[-1].path, False


async def documents(repository: DocumentRepository, space_id: str) -> AsyncIterator[StoredDocument]:
    """Every live document of the space with its content, in path order."""
    after = ""
    while True:
        page = await repository.list_documents(space_id, after=after, limit=DOCUMENT_PAGE)
        for document in page:
            yield document
        if len(page) < DOCUMENT_PAGE:
            return
        after = page[-1].path


class Details:
    """A run's detail lines, collected up to MAX_RUN_DETAILS; past that only counted, with
    a last line saying how many were left out (the run's counts stay exact)."""

    def __init__(self, limit: int = MAX_RUN_DETAILS) -> None:
        self._limit = limit
        self._lines: list[str] = []
        self._left_out = 0

    def add(self, line: str) -> None:
        if len(self._lines) < self._limit:
            self._lines.append(line)
        else:
            self._left_out += 1

    def lines(self) -> tuple[str, ...]:
        if not self._left_out:
            return tuple(self._lines)
        kept = self._lines[: self._limit - 1]
        return (*kept, f"... and {self._left_out + len(self._lines) - len(kept)} more")
