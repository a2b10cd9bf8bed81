"""The maintenance worker of `engram dev` and `engram serve maintenance`: its jobs, built
on the process's services (`MaintenanceDeps`), and its stores, service and schedule."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from engram.domain.ports import AuditSink
from engram.maintenance.ports import (
    Job,
    JobRunStore,
    LeaseStore,
    MaintenanceDeps,
    SpaceSettingsStore,
)
from engram.maintenance.service import MaintenanceService
from engram.maintenance.worker import MaintenanceWorker, WorkerConfig
from engram.runtime.settings import Settings

# Builds a process's jobs from its services (tests pass their own).
JobFactory = Callable[[MaintenanceDeps], list[Job]]


def worker_config(settings: Settings) -> WorkerConfig:
    return WorkerConfig(
        tick_seconds=settings.maintenance_tick_seconds,
        lease_seconds=settings.maintenance_lease_seconds,
        run_timeout_seconds=settings.maintenance_run_timeout_seconds,
        retry_after_failure_seconds=settings.maintenance_retry_after_failure_seconds,
        run_retention_days=settings.maintenance_run_retention_days,
        max_on_demand=settings.maintenance_max_on_demand,
    )


def maintenance_jobs(deps: MaintenanceDeps, settings: Settings) -> list[Job]:
    """Every job the worker runs (RunJob accepts these names), in both process kinds: the
    one list, so `engram dev` and `engram serve maintenance` never differ."""
    jobs: list[Job] = []
    # Dreaming (engram.maintenance.dreaming.DreamJob) and the hygiene jobs
    # (engram.maintenance.hygiene.hygiene_jobs(deps, interval)) are added here.
    return jobs


@dataclass(frozen=True)
class MaintenanceStores:
    leases: LeaseStore
    runs: JobRunStore
    settings: SpaceSettingsStore


@dataclass
class Maintenance:
    worker: MaintenanceWorker
    service: MaintenanceService
    # What the jobs are built on (tests build their own jobs on it).
    deps: MaintenanceDeps


def start_maintenance(
    settings: Settings,
    deps: MaintenanceDeps,
    stores: MaintenanceStores,
    audit: AuditSink,
    stack: contextlib.AsyncExitStack,
    *,
    jobs: JobFactory | None = None,
) -> Maintenance:
    """The worker on the process's stores (its schedule started unless
    ENGRAM_MAINTENANCE_SCHEDULE is off) and the MaintenanceService over it; the worker stops
    with the stack. `jobs` builds other jobs than the configured ones (tests)."""
    worker = MaintenanceWorker(
        maintenance_jobs(deps, settings) if jobs is None else jobs(deps),
        deps.repository,
        stores.leases,
        stores.runs,
        stores.settings,
        worker_config(settings),
        clock=deps.clock,
    )
    stack.push_async_callback(worker.stop)
    if settings.maintenance_schedule:
        worker.start()
    service = MaintenanceService(worker, stores.runs, stores.settings, audit)
    return Maintenance(worker, service, deps)
