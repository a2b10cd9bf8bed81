"""A maintenance job of the tests' own: `UsageSnapshotJob` reads a space's usage through the
StorageService as the maintenance principal and reports it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import ClassVar

from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.ports import MaintenanceDeps

DAY = timedelta(days=1)


class UsageSnapshotJob:
    """Reports a space's document count and bytes (read through StorageService as the
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
        usage = await self._deps.storage.usage(self._deps.principal, space)
        # Every run yields once more, so racing workers interleave.
        await asyncio.sleep(0.01)
        return JobReport(
            counts={"documents": usage.document_count, "bytes": usage.used_bytes},
            message=f"{usage.document_count} documents",
        )
