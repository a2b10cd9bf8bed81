"""How the worker's records are stored (the SQLite and MongoDB stores share these shapes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engram.backends.sqlite import from_micros, to_micros
from engram.domain.maintenance import JobOutcome, JobRun, LogRetention, SpaceSettings
from engram.domain.spaces import parse_space_id


def settings_to_dict(chosen: SpaceSettings) -> dict[str, Any]:
    return {
        "dream_enabled": chosen.dream_enabled,
        "log_retention": chosen.log_retention.value,
        "max_daily_logs": chosen.max_daily_logs,
        "log_retention_days": chosen.log_retention_days,
        "stale_after_days": chosen.stale_after_days,
    }


def settings_from_dict(values: Mapping[str, Any]) -> SpaceSettings:
    defaults = SpaceSettings()
    return SpaceSettings(
        dream_enabled=bool(values.get("dream_enabled", defaults.dream_enabled)),
        log_retention=LogRetention(values.get("log_retention", defaults.log_retention)),
        max_daily_logs=int(values.get("max_daily_logs", defaults.max_daily_logs)),
        log_retention_days=int(values.get("log_retention_days", defaults.log_retention_days)),
        stale_after_days=int(values.get("stale_after_days", defaults.stale_after_days)),
    )


def settings_json(chosen: SpaceSettings) -> str:
    return json.dumps(settings_to_dict(chosen), sort_keys=True)


def run_to_dict(run: JobRun) -> dict[str, Any]:
    """A run as one flat record; times as microseconds, so pages cut exactly."""
    return {
        "run_id": run.run_id,
        "job": run.job,
        "space_id": run.space.id,
        "started_us": to_micros(run.started_at),
        "finished_us": None if run.finished_at is None else to_micros(run.finished_at),
        "outcome": run.outcome.value,
        "worker": run.worker,
        "on_demand": run.on_demand,
        "counts": dict(run.counts),
        "message": run.message,
        "details": list(run.details),
    }


def run_from_dict(row: Mapping[str, Any]) -> JobRun:
    finished = row.get("finished_us")
    return JobRun(
        run_id=str(row["run_id"]),
        job=str(row["job"]),
        space=parse_space_id(str(row["space_id"])),
        started_at=from_micros(int(row["started_us"])),
        outcome=JobOutcome(row["outcome"]),
        worker=str(row["worker"]),
        on_demand=bool(row["on_demand"]),
        finished_at=None if finished is None else from_micros(int(finished)),
        counts={str(k): int(v) for k, v in dict(row.get("counts") or {}).items()},
        message=str(row.get("message", "")),
        details=tuple(str(line) for line in row.get("details") or ()),
    )


def micros_or_none(at: datetime | None) -> int | None:
    return None if at is None else to_micros(at)
