"""The hygiene jobs (issue 15 item 3): daily-log retention, version pruning, embedding
backfill, usage reconcile, staleness and duplicate reports. Each is a `Job`, run on every
space once per ENGRAM_HYGIENE_INTERVAL_HOURS (log retention only where a space turned it
on)."""

from __future__ import annotations

from datetime import timedelta

from engram.maintenance.hygiene.duplicate_report import DuplicateReportJob
from engram.maintenance.hygiene.embedding_backfill import EmbeddingBackfillJob
from engram.maintenance.hygiene.log_retention import LogRetentionJob
from engram.maintenance.hygiene.staleness_report import StalenessReportJob
from engram.maintenance.hygiene.usage_reconcile import UsageReconcileJob
from engram.maintenance.hygiene.version_pruning import VersionPruningJob
from engram.maintenance.ports import Job, MaintenanceDeps

__all__ = [
    "DuplicateReportJob",
    "EmbeddingBackfillJob",
    "LogRetentionJob",
    "StalenessReportJob",
    "UsageReconcileJob",
    "VersionPruningJob",
    "hygiene_jobs",
]


def hygiene_jobs(deps: MaintenanceDeps, interval: timedelta) -> list[Job]:
    """Every hygiene job, each run once per `interval` on a space."""
    return [
        LogRetentionJob(deps, interval),
        VersionPruningJob(deps, interval),
        EmbeddingBackfillJob(deps, interval),
        UsageReconcileJob(deps, interval),
        StalenessReportJob(deps, interval),
        DuplicateReportJob(deps, interval),
    ]
