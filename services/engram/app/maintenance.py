"""The maintenance worker of `engram dev` and `engram serve maintenance`: its jobs, built
on the process's services (`MaintenanceDeps`), and its stores, service and schedule."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from engram.authz.enforcement import PolicyAuthorizer
from engram.domain.ports import AuditSink
from engram.maintenance.chat import ChatConfig, OpenAICompatibleChat
from engram.maintenance.dream_watermarks import WatermarkStore
from engram.maintenance.dreaming import DreamConfig, DreamJob
from engram.maintenance.hygiene import hygiene_jobs
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


def maintenance_jobs(
    deps: MaintenanceDeps,
    settings: Settings,
    stores: MaintenanceStores,
    stack: contextlib.AsyncExitStack,
) -> list[Job]:
    """Every job the worker runs (RunJob accepts these names), in both process kinds: the
    one list, so `engram dev` and `engram serve maintenance` never differ."""
    return [
        dream_job(deps, settings, stores.watermarks, stack),
        *hygiene_jobs(deps, timedelta(hours=settings.hygiene_interval_hours)),
    ]


def dream_job(
    deps: MaintenanceDeps,
    settings: Settings,
    watermarks: WatermarkStore,
    stack: contextlib.AsyncExitStack,
) -> DreamJob:
    """Dreaming on the process's storage, as the maintenance principal; its chat model
    client when ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL are set (without them a run fails
    saying so, and the schedule never runs it: ENGRAM_DREAM_ENABLED requires them)."""
    model: OpenAICompatibleChat | None = None
    if settings.llm_base_url and settings.llm_model:
        model = OpenAICompatibleChat(
            ChatConfig(
                base_url=settings.llm_base_url,
                model=settings.llm_model,
                api_key=(settings.llm_api_key.get_secret_value() if settings.llm_api_key else None),
                timeout_seconds=settings.llm_timeout_seconds,
                max_tokens=settings.llm_max_tokens,
            )
        )
        stack.push_async_callback(model.close)
    config = DreamConfig(
        enabled=settings.dream_enabled,
        interval=timedelta(hours=settings.dream_interval_hours),
        max_input_chars=settings.dream_max_input_chars,
    )
    return DreamJob(deps.storage, deps.principal, watermarks, model, config, clock=deps.clock)


@dataclass(frozen=True)
class MaintenanceStores:
    leases: LeaseStore
    runs: JobRunStore
    settings: SpaceSettingsStore
    # Dreaming's per-space watermarks.
    watermarks: WatermarkStore


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
        maintenance_jobs(deps, settings, stores, stack) if jobs is None else jobs(deps),
        deps.storage,
        stores.leases,
        stores.runs,
        stores.settings,
        worker_config(settings),
        clock=deps.clock,
    )
    stack.push_async_callback(worker.stop)
    if settings.maintenance_schedule:
        worker.start()
    service = MaintenanceService(worker, stores.runs, stores.settings, audit, PolicyAuthorizer())
    return Maintenance(worker, service, deps)
