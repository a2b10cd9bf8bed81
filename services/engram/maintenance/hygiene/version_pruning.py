"""version_pruning: erases kept versions beyond the retention. The write path prunes the
document it writes; this catches documents not written since the retention was lowered."""

from __future__ import annotations

from typing import ClassVar

from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import HygieneJob


class VersionPruningJob(HygieneJob):
    name: ClassVar[str] = "version_pruning"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        pruned = await self._deps.storage.prune_versions(space)
        return JobReport(
            counts={"versions_pruned": pruned},
            message=f"{pruned} versions beyond the retention erased",
        )
