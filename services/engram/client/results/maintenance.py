"""MaintenanceService's types: job runs, and each space's maintenance settings (which
set_space_maintenance also takes), with their wire conversions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from engram.client.mapping import optional_time, space_from_proto
from engram.client.models import Space
from engram.domain.errors import InvalidArgument
from engram.v1 import maintenance_pb2

OUTCOMES = {
    maintenance_pb2.JOB_OUTCOME_RUNNING: "running",
    maintenance_pb2.JOB_OUTCOME_SUCCEEDED: "succeeded",
    maintenance_pb2.JOB_OUTCOME_FAILED: "failed",
}
LOG_RETENTIONS = {
    "off": maintenance_pb2.LOG_RETENTION_OFF,
    "archive": maintenance_pb2.LOG_RETENTION_ARCHIVE,
    "delete": maintenance_pb2.LOG_RETENTION_DELETE,
}
LOG_RETENTION_NAMES = {number: name for name, number in LOG_RETENTIONS.items()}


@dataclass(frozen=True, slots=True)
class JobRun:
    run_id: str
    job: str
    space: Space
    space_id: str
    started_at: datetime | None
    # None while the run is under way.
    finished_at: datetime | None
    # running, succeeded or failed.
    outcome: str
    counts: Mapping[str, int]
    message: str
    details: tuple[str, ...]
    worker: str
    on_demand: bool


@dataclass(frozen=True, slots=True)
class SpaceMaintenance:
    """What the maintenance worker does to one space (0 = the server's default)."""

    dream_enabled: bool = False
    # off, archive or delete.
    log_retention: str = "off"
    max_daily_logs: int = 0
    log_retention_days: int = 0
    stale_after_days: int = 0


def job_run(message: maintenance_pb2.JobRun) -> JobRun:
    return JobRun(
        run_id=message.run_id,
        job=message.job,
        space=space_from_proto(message.space),
        space_id=message.space_id,
        started_at=optional_time(message, "started_at"),
        finished_at=optional_time(message, "finished_at"),
        outcome=OUTCOMES.get(message.outcome, "unspecified"),
        counts=dict(message.counts),
        message=message.message,
        details=tuple(message.details),
        worker=message.worker,
        on_demand=message.on_demand,
    )


def settings_from_proto(message: maintenance_pb2.SpaceMaintenance) -> SpaceMaintenance:
    return SpaceMaintenance(
        dream_enabled=message.dream_enabled,
        log_retention=LOG_RETENTION_NAMES.get(message.log_retention, "off"),
        max_daily_logs=message.max_daily_logs,
        log_retention_days=message.log_retention_days,
        stale_after_days=message.stale_after_days,
    )


def settings_to_proto(wanted: SpaceMaintenance) -> maintenance_pb2.SpaceMaintenance:
    retention = LOG_RETENTIONS.get(wanted.log_retention)
    if retention is None:
        raise InvalidArgument(
            f"log_retention {wanted.log_retention!r} is not one of {', '.join(LOG_RETENTIONS)}",
            field="log_retention",
        )
    return maintenance_pb2.SpaceMaintenance(
        dream_enabled=wanted.dream_enabled,
        log_retention=retention,
        max_daily_logs=wanted.max_daily_logs,
        log_retention_days=wanted.log_retention_days,
        stale_after_days=wanted.stale_after_days,
    )
