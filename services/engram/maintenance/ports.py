"""What a maintenance job is, and the parts of a process jobs are built on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Protocol

from engram.domain.maintenance import JobReport, JobRun, SpaceSettings
from engram.domain.maintenance_rules import LastRuns
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.indexer.service import ReindexQueue
from engram.indexes.ports import KeywordIndex, VectorIndex
from engram.quota.service import QuotaService
from engram.storage.ports import DocumentRepository
from engram.storage.service import StorageService


def utc_now() -> datetime:
    return datetime.now(UTC)


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
    # Embedding backfill: a pending change event older than this means the indexer is
    # stopped or stuck (ENGRAM_BACKFILL_MAX_INDEXING_LAG_SECONDS).
    max_indexing_lag: timedelta = timedelta(seconds=900)


class SpaceSource(Protocol):
    """Where the worker finds the spaces to walk (the document repository)."""

    async def all_spaces(self, *, after: str, limit: int) -> list[SpaceRef]: ...


# --- the worker's stores (SQLite in `engram dev`, MongoDB in production) ---------------------


@dataclass(frozen=True, slots=True)
class Lease:
    """A held lease: `holder` may run the work keyed `key` until `expires_at` unless it
    renews; `generation` identifies the holding on stores that keep a history (MongoDB)."""

    key: str
    holder: str
    expires_at: datetime
    generation: int = 0


class LeaseStore(Protocol):
    """Exclusive, expiring leases shared by every worker on one store."""

    async def acquire(self, key: str, holder: str, ttl: timedelta) -> Lease | None:
        """Takes the lease for `holder` for `ttl`; None while another holder's lease has
        not expired (a crashed holder's lease expires: nothing else frees it)."""
        ...

    async def renew(self, lease: Lease, ttl: timedelta) -> Lease | None:
        """Extends a held lease by `ttl` from now; None when it was lost (it expired and
        another holder took it)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Gives the lease up (a lease already lost is left to its new holder)."""
        ...

    async def current(self, key: str) -> Lease | None:
        """The unexpired lease on `key`, if any."""
        ...


class JobRunStore(Protocol):
    """The record of job runs, and when each job last finished on each space."""

    async def start(self, run: JobRun) -> None:
        """Records a run that has started (outcome RUNNING)."""
        ...

    async def finish(self, run: JobRun) -> None:
        """Records the end of a started run (its outcome, counts, message and details)."""
        ...

    async def abandon(self, job: str, space_id: str, at: datetime, message: str) -> int:
        """Marks the job's runs on the space still RUNNING as FAILED (their worker stopped
        before finishing: its lease expired); returns how many."""
        ...

    async def page(
        self,
        *,
        space_id: str | None,
        job: str | None,
        before: tuple[int, str] | None,
        limit: int,
    ) -> list[JobRun]:
        """Runs newest first (started time, then run id, descending), of one space or of
        all; `before` = the (started microseconds, run id) of the last run already seen."""
        ...

    async def last_runs(self, space_ids: Sequence[str]) -> dict[tuple[str, str], LastRuns]:
        """When each job last finished on each of these spaces, by (job, space id)."""
        ...

    async def prune(self, older_than: datetime, limit: int) -> int:
        """Deletes finished runs that started before `older_than`, at most `limit`."""
        ...


class SpaceSettingsStore(Protocol):
    """Each space's maintenance settings (absent = the defaults)."""

    async def get_many(self, space_ids: Sequence[str]) -> dict[str, SpaceSettings]: ...

    async def put(self, space_id: str, settings: SpaceSettings) -> None: ...
