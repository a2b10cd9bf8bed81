"""What every hygiene job shares: its schedule (one interval, every space) and its run's
detail lines. Jobs reach documents through `deps.storage` (MaintenanceStorage) only."""

from __future__ import annotations

from datetime import timedelta

from engram.domain.maintenance import MAX_RUN_DETAILS, SpaceSettings
from engram.maintenance.ports import MaintenanceDeps


class HygieneJob:
    """A job run on every space, once per `interval`."""

    def __init__(self, deps: MaintenanceDeps, interval: timedelta) -> None:
        self._deps = deps
        self._interval = interval

    def scheduled(self, settings: SpaceSettings) -> bool:
        return True

    def interval(self, settings: SpaceSettings) -> timedelta:
        return self._interval


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
