"""log_retention: daily logs past the space's retention (older than log_retention_days, or
beyond the newest max_daily_logs) are archived under archive/daily/ or deleted, as the
space's log_retention says; off by default.

Archiving is a copy then a delete, each conditional, so nothing is lost and a run cut
short between the two is completed by the next one: the copy is made create-only; a copy
already in place with the log's content (an earlier run's) is kept, one that is a prefix of
the log (the log grew by appends before the delete) is brought up to the log's content,
and anything else there is left alone and reported. The log is deleted only with the etag
read before the copy, so an append made meanwhile keeps it for the next run.
"""

from __future__ import annotations

from typing import ClassVar

from engram.domain.documents import StoredDocument
from engram.domain.errors import DocumentNotFound, EtagMismatch
from engram.domain.hygiene import (
    archive_completes,
    archived_log_path,
    daily_logs,
    logs_to_retire,
)
from engram.domain.maintenance import JobReport, LogRetention, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.domain.workspace import JOURNAL_DIRS
from engram.maintenance.hygiene.common import Details, HygieneJob


class LogRetentionJob(HygieneJob):
    name: ClassVar[str] = "log_retention"

    def scheduled(self, settings: SpaceSettings) -> bool:
        return settings.log_retention is not LogRetention.OFF

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        if settings.log_retention is LogRetention.OFF:
            return JobReport(message="log retention is off for this space")
        paths = [
            entry.path
            for directory in JOURNAL_DIRS
            async for entry in self._deps.storage.list_paths(space, directory)
        ]
        logs = daily_logs(paths)
        retired = logs_to_retire(
            logs,
            self._deps.clock().date(),
            max_daily_logs=settings.max_daily_logs,
            retention_days=settings.log_retention_days,
        )
        archive = settings.log_retention is LogRetention.ARCHIVE
        done = skipped = 0
        details = Details()
        for log in retired:
            outcome = await (
                self._archive(space, log.path) if archive else self._delete(space, log.path)
            )
            if outcome is None:
                done += 1
                details.add(
                    f"{log.path} -> {archived_log_path(log.path)}"
                    if archive
                    else f"{log.path} deleted"
                )
            else:
                skipped += 1
                details.add(f"{log.path} left in place: {outcome}")
        verb = "archived" if archive else "deleted"
        return JobReport(
            counts={"logs_checked": len(logs), f"logs_{verb}": done, "logs_skipped": skipped},
            message=f"{done} of {len(logs)} daily logs {verb}"
            + (f", {skipped} left in place" if skipped else ""),
            details=details.lines(),
        )

    async def _read(self, space: SpaceRef, path: str) -> StoredDocument | None:
        try:
            return await self._deps.storage.read(space, path)
        except DocumentNotFound:
            return None

    async def _delete(
        self, space: SpaceRef, path: str, log: StoredDocument | None = None
    ) -> str | None:
        """Deletes the log if it still is what was read; the reason it was not, if not."""
        log = log or await self._read(space, path)
        if log is None:
            return None  # gone already
        try:
            await self._deps.storage.delete(space, path, expected_sha256=log.sha256)
        except DocumentNotFound:
            return None
        except EtagMismatch:
            return "it changed during the run; the next run retires it"
        return None

    async def _archive(self, space: SpaceRef, path: str) -> str | None:
        deps = self._deps
        log = await self._read(space, path)
        if log is None:
            return None
        target = archived_log_path(path)
        copy = await self._read(space, target)
        try:
            if copy is None:
                await deps.storage.write(space, target, log.content, create_only=True)
            elif copy.content != log.content:
                if not archive_completes(copy.content, log.content):
                    return f"{target} already holds other content"
                await deps.storage.write(space, target, log.content, expected_sha256=copy.sha256)
        except EtagMismatch:
            return f"{target} changed during the run; the next run tries again"
        return await self._delete(space, path, log)
