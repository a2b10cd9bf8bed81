"""MaintenanceService protobuf <-> domain conversions."""

from __future__ import annotations

from engram.domain.errors import InvalidArgument
from engram.domain.maintenance import JobOutcome, JobRun, LogRetention, SpaceSettings
from engram.domain.maintenance_rules import space_settings
from engram.v1 import maintenance_pb2
from engram.wire import space_to_proto, timestamp

OUTCOMES: dict[JobOutcome, maintenance_pb2.JobOutcome.ValueType] = {
    JobOutcome.RUNNING: maintenance_pb2.JOB_OUTCOME_RUNNING,
    JobOutcome.SUCCEEDED: maintenance_pb2.JOB_OUTCOME_SUCCEEDED,
    JobOutcome.FAILED: maintenance_pb2.JOB_OUTCOME_FAILED,
}
RETENTION_FROM_PROTO: dict[int, LogRetention] = {
    # Unset is the default, seed 000's: keep 60 daily logs, archive the older ones.
    maintenance_pb2.LOG_RETENTION_UNSPECIFIED: LogRetention.ARCHIVE,
    maintenance_pb2.LOG_RETENTION_OFF: LogRetention.OFF,
    maintenance_pb2.LOG_RETENTION_ARCHIVE: LogRetention.ARCHIVE,
    maintenance_pb2.LOG_RETENTION_DELETE: LogRetention.DELETE,
}
RETENTION_TO_PROTO: dict[LogRetention, maintenance_pb2.LogRetention.ValueType] = {
    LogRetention.OFF: maintenance_pb2.LOG_RETENTION_OFF,
    LogRetention.ARCHIVE: maintenance_pb2.LOG_RETENTION_ARCHIVE,
    LogRetention.DELETE: maintenance_pb2.LOG_RETENTION_DELETE,
}


def run_to_proto(run: JobRun) -> maintenance_pb2.JobRun:
    message = maintenance_pb2.JobRun(
        run_id=run.run_id,
        job=run.job,
        space=space_to_proto(run.space),
        space_id=run.space.id,
        started_at=timestamp(run.started_at),
        outcome=OUTCOMES[run.outcome],
        counts=dict(run.counts),
        message=run.message,
        details=list(run.details),
        worker=run.worker,
        on_demand=run.on_demand,
    )
    if run.finished_at is not None:
        message.finished_at.CopyFrom(timestamp(run.finished_at))
    return message


def settings_to_proto(chosen: SpaceSettings) -> maintenance_pb2.SpaceMaintenance:
    return maintenance_pb2.SpaceMaintenance(
        dream_enabled=chosen.dream_enabled,
        log_retention=RETENTION_TO_PROTO[chosen.log_retention],
        max_daily_logs=chosen.max_daily_logs,
        log_retention_days=chosen.log_retention_days,
        stale_after_days=chosen.stale_after_days,
    )


def settings_from_proto(message: maintenance_pb2.SpaceMaintenance) -> SpaceSettings:
    retention = RETENTION_FROM_PROTO.get(message.log_retention)
    if retention is None:
        raise InvalidArgument(
            "settings.log_retention must be LOG_RETENTION_OFF, _ARCHIVE or _DELETE",
            field="settings.log_retention",
        )
    return space_settings(
        dream_enabled=message.dream_enabled,
        log_retention=retention,
        max_daily_logs=message.max_daily_logs,
        log_retention_days=message.log_retention_days,
        stale_after_days=message.stale_after_days,
    )
