"""The maintenance worker's rules, as pure functions: when a job is due on a space, which
lease a run takes, and what settings an admin may give a space."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from engram.domain.errors import InvalidArgument
from engram.domain.maintenance import (
    DEFAULT_MAX_DAILY_LOGS,
    DEFAULT_STALE_AFTER_DAYS,
    LogRetention,
    SpaceSettings,
)

# Upper bounds of the settings (a typo of a few zeros is refused, not obeyed).
MAX_DAILY_LOGS_LIMIT = 100_000
MAX_DAYS = 36_500


@dataclass(frozen=True, slots=True)
class LastRuns:
    """When a job last finished on a space, by outcome (None = never)."""

    succeeded_at: datetime | None = None
    failed_at: datetime | None = None


def lease_key(job: str, space_id: str) -> str:
    """One lease per job and space: two jobs on one space, or one job on two spaces, run
    side by side; the same job on the same space never does."""
    return f"{job}|{space_id}"


def is_due(now: datetime, interval: timedelta, last: LastRuns, retry_after: timedelta) -> bool:
    """A scheduled job runs when its last success is older than its interval; after a
    failure it waits `retry_after` (or its interval, when shorter) before trying again, so a
    job that keeps failing does not run on every tick."""
    if last.succeeded_at is not None and now - last.succeeded_at < interval:
        return False
    failed_last = last.failed_at is not None and (
        last.succeeded_at is None or last.failed_at > last.succeeded_at
    )
    if failed_last and last.failed_at is not None:
        return now - last.failed_at >= min(retry_after, interval)
    return True


def space_settings(
    *,
    dream_enabled: bool,
    log_retention: LogRetention,
    max_daily_logs: int,
    log_retention_days: int,
    stale_after_days: int,
) -> SpaceSettings:
    """Settings as an admin gives them (0 = the default where the field has one), checked;
    raises InvalidArgument naming the field and its allowed range."""
    for name, value, limit in (
        ("max_daily_logs", max_daily_logs, MAX_DAILY_LOGS_LIMIT),
        ("log_retention_days", log_retention_days, MAX_DAYS),
        ("stale_after_days", stale_after_days, MAX_DAYS),
    ):
        if not 0 <= value <= limit:
            raise InvalidArgument(
                f"settings.{name} must be between 0 and {limit}, got {value}",
                field=f"settings.{name}",
            )
    return SpaceSettings(
        dream_enabled=dream_enabled,
        log_retention=log_retention,
        max_daily_logs=max_daily_logs or DEFAULT_MAX_DAILY_LOGS,
        log_retention_days=log_retention_days,
        stale_after_days=stale_after_days or DEFAULT_STALE_AFTER_DAYS,
    )
