"""A maintenance job of the tests' own: `UsageSnapshotJob` lists a space's documents through
StorageService as the maintenance principal and reports their count and bytes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import ClassVar

from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.ports import MaintenanceDeps

DAY = timedelta(days=1)


class UsageSnapshotJob:
    """Reports a space's document count and bytes (listed through StorageService as the
    maintenance principal); `gate`, when set, holds each run until the test opens it."""

    name: ClassVar[str] = "usage_snapshot"

    def __init__(self, deps: MaintenanceDeps, *, gate: asyncio.Event | None = None) -> None:
        self._deps = deps
        self._gate = gate
        self.started = asyncio.Event()

    def scheduled(self, settings: SpaceSettings) -> bool:
        return True

    def interval(self, settings: SpaceSettings) -> timedelta:
        return DAY

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        self.started.set()
        if self._gate is not None:
            await self._gate.wait()
        documents = used = 0
        async for entry in self._deps.storage.list_paths(space):
            documents += 1
            used += entry.size_bytes
        # Every run yields once more, so racing workers interleave.
        await asyncio.sleep(0.01)
        return JobReport(
            counts={"documents": documents, "bytes": used},
            message=f"{documents} documents",
        )
