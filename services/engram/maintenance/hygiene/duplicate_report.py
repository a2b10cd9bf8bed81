"""duplicate_report: groups the documents of a space with the same normalised content
(see `domain.hygiene.normalised_content`), and the near-duplicates (MinHash of word
shingles, `domain.near_duplicates`) with a merge suggestion; changes nothing."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from engram.domain.hygiene import (
    content_key,
    counts_for_staleness,
    duplicate_groups,
    duplicate_line,
    normalised_content,
)
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.near_duplicates import near_duplicate_groups, near_duplicate_line, signature
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob


class DuplicateReportJob(HygieneJob):
    name: ClassVar[str] = "duplicate_report"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        # Only a digest and a MinHash signature (1 KiB) per document are held, never the
        # contents of the whole space.
        keys: dict[str, str | None] = {}
        signatures = {}
        sizes: dict[str, int] = {}
        async for document in self._deps.storage.documents(space):
            keys[document.path], minhash = await asyncio.to_thread(_fingerprints, document.content)
            if minhash is not None and counts_for_staleness(document.path):
                signatures[document.path] = minhash
                sizes[document.path] = len(document.content)
        groups = duplicate_groups(keys)
        near = await asyncio.to_thread(near_duplicate_groups, signatures, sizes, groups)
        details = Details()
        for group in groups:
            details.add(duplicate_line(group))
        for alike in near:
            details.add(near_duplicate_line(alike))
        duplicates = sum(len(group) for group in groups)
        near_documents = sum(len(group.paths) for group in near)
        return JobReport(
            counts={
                "documents_checked": len(keys),
                "duplicate_groups": len(groups),
                "duplicate_documents": duplicates,
                "near_duplicate_groups": len(near),
                "near_duplicate_documents": near_documents,
            },
            message=(
                f"{len(groups)} groups of identical documents ({duplicates} documents), "
                f"{len(near)} groups of near-duplicates ({near_documents} documents)"
            ),
            details=details.lines(),
        )


def _fingerprints(content: str) -> tuple[str | None, object]:
    """The exact-duplicate key and the near-duplicate signature of one document."""
    return content_key(content), signature(normalised_content(content))
