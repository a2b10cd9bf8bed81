"""What a maintenance job is, and the parts of a process jobs are built on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Protocol

from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.indexer.ports import KeywordIndex, VectorIndex
from engram.indexer.service import ReindexQueue
from engram.quota.service import QuotaService
from engram.storage.ports import DocumentRepository
from engram.storage.service import StorageService


class Job(Protocol):
    """One kind of maintenance on one space. The worker takes the job's lease for the
    space, runs it, and records the run; a job only does the work and reports it.

    A run must be safe to repeat: a second run right after the first changes nothing, and a
    run cut short (crash, lease lost) is completed by the next one.
    """

    # The job's name in RunJob, ListJobRuns, metrics and `engram jobs` ("dream").
    name: ClassVar[str]

    def scheduled(self, settings: SpaceSettings) -> bool:
        """Whether the schedule runs this job on a space with these settings (RunJob runs
        it regardless)."""
        ...

    def interval(self, settings: SpaceSettings) -> timedelta:
        """How long after a successful run the schedule runs it again."""
        ...

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        """Does the work; raises an EngramError (or anything) when it fails."""
        ...


@dataclass(frozen=True)
class MaintenanceDeps:
    """The parts of a process the jobs are built on; the composition root fills it in
    `engram dev` (the embedded services) and in `engram serve maintenance` (the same
    services on MongoDB, NATS, OpenSearch and the vector index)."""

    # Reads and writes as `principal`: quota, events and authorization as for any caller.
    storage: StorageService
    # Direct access for what no RPC offers (version pruning, scans for reports).
    repository: DocumentRepository
    quota: QuotaService
    # Re-queues documents for the indexer (embedding backfill).
    reindex: ReindexQueue
    keyword: KeywordIndex
    vector: VectorIndex
    # The maintenance worker's own identity: a service principal.
    principal: Principal
    clock: Callable[[], datetime]
