"""staleness_report: lists the documents not updated for the space's stale_after_days;
changes nothing."""

from __future__ import annotations

from typing import ClassVar

from engram.domain.hygiene import counts_for_staleness, stale_cutoff, stale_line
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob


class StalenessReportJob(HygieneJob):
    name: ClassVar[str] = "staleness_report"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        now = self._deps.clock()
        cutoff = stale_cutoff(now, settings.stale_after_days)
        checked = stale = 0
        details = Details()
        async for entry in self._deps.storage.list_paths(space):
            if not counts_for_staleness(entry.path):
                continue
            checked += 1
            if entry.updated_at < cutoff:
                stale += 1
                details.add(stale_line(entry.path, entry.updated_at, now))
        return JobReport(
            counts={"documents_checked": checked, "documents_stale": stale},
            message=f"{stale} of {checked} documents not updated since {cutoff.date()}",
            details=details.lines(),
        )
