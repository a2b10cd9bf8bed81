"""The maintenance worker's records: a space's maintenance settings, what a job run
reports, and the record of a run. Pure data; the worker and its stores exchange these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from engram.domain.spaces import SpaceRef

# Defaults the workspace seed documents (AGENTS.md): daily logs kept, and the age after
# which a document counts as stale.
DEFAULT_MAX_DAILY_LOGS = 60
DEFAULT_STALE_AFTER_DAYS = 90
# At most this many item lines are kept in a run's details (the counts stay exact).
MAX_RUN_DETAILS = 200


class LogRetention(StrEnum):
    OFF = "off"
    # Moved under archive/daily/: still read, listed and searched.
    ARCHIVE = "archive"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class SpaceSettings:
    """What the maintenance worker does to one space (the defaults until an admin sets
    them with SetSpaceMaintenance)."""

    dream_enabled: bool = False
    # Seed 000's hygiene, on by default: the newest 60 daily logs stay, older ones move to
    # archive/daily/ (still read, listed and searched).
    log_retention: LogRetention = LogRetention.ARCHIVE
    max_daily_logs: int = DEFAULT_MAX_DAILY_LOGS
    # 0 = no age limit.
    log_retention_days: int = 0
    stale_after_days: int = DEFAULT_STALE_AFTER_DAYS


class JobOutcome(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JobReport:
    """What one run of a job on one space did: counts by name ("logs_archived": 3), a
    one-line message, and item lines (stale paths, duplicate groups), at most
    MAX_RUN_DETAILS of them."""

    counts: Mapping[str, int] = field(default_factory=dict)
    message: str = ""
    details: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobRun:
    """The record of one run of one job on one space."""

    run_id: str
    job: str
    space: SpaceRef
    started_at: datetime
    outcome: JobOutcome
    worker: str
    on_demand: bool
    finished_at: datetime | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    message: str = ""
    details: tuple[str, ...] = ()

    @property
    def space_id(self) -> str:
        return self.space.id
