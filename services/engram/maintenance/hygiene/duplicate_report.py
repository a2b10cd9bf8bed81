"""duplicate_report: groups the documents of a space with the same normalised content
(see `domain.hygiene.normalised_content`); changes nothing."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from engram.domain.hygiene import content_key, duplicate_groups, duplicate_line
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob, documents

# Documents at least this long are normalised and hashed on a worker thread.
OFF_LOOP_CHARS = 64 * 1024


class DuplicateReportJob(HygieneJob):
    name: ClassVar[str] = "duplicate_report"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        # Only a digest per document is held, never the contents of the whole space.
        keys: dict[str, str | None] = {}
        async for document in documents(self._deps.repository, space.id):
            if len(document.content) >= OFF_LOOP_CHARS:
                keys[document.path] = await asyncio.to_thread(content_key, document.content)
            else:
                keys[document.path] = content_key(document.content)
        groups = duplicate_groups(keys)
        details = Details()
        for group in groups:
            details.add(duplicate_line(group))
        duplicates = sum(len(group) for group in groups)
        return JobReport(
            counts={
                "documents_checked": len(keys),
                "duplicate_groups": len(groups),
                "duplicate_documents": duplicates,
            },
            message=f"{len(groups)} groups of identical documents ({duplicates} documents)",
            details=details.lines(),
        )
