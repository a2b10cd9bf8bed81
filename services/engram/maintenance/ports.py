"""What a maintenance job is, and the parts of a process jobs are built on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Protocol

from engram.domain.documents import PathEntry, StoredDocument
from engram.domain.maintenance import JobReport, JobRun, SpaceSettings
from engram.domain.maintenance_rules import LastRuns
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef
from engram.indexer.service import ReindexQueue
from engram.indexes.ports import KeywordIndex, VectorIndex
from engram.quota.service import ReconcileReport


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


class MaintenanceStorage(Protocol):
    """What the jobs and the worker need of StorageService, acting as the maintenance
    principal: quota, events and authorization as for any caller. In process over the local
    StorageService (`engram dev`), over gRPC otherwise (`engram serve maintenance` owns no
    documents: it reaches them through StorageService's RPCs only)."""

    async def read(self, space: SpaceRef, path: str) -> StoredDocument:
        """The current document; raises DocumentNotFound."""
        ...

    async def write(
        self,
        space: SpaceRef,
        path: str,
        content: str,
        *,
        append: bool = False,
        expected_sha256: str = "",
        create_only: bool = False,
    ) -> int:
        """Writes (conditionally: EtagMismatch) and returns the bytes it added."""
        ...

    async def delete(self, space: SpaceRef, path: str, *, expected_sha256: str) -> None:
        """Deletes the document if its sha256 is still `expected_sha256` (EtagMismatch
        otherwise, DocumentNotFound when gone)."""
        ...

    def list_paths(
        self, space: SpaceRef, directory: str = "", *, recursive: bool = True
    ) -> AsyncIterator[PathEntry]:
        """The documents under `directory` ('' = all; only its direct children unless
        `recursive`), in path order."""
        ...

    def documents(self, space: SpaceRef) -> AsyncIterator[StoredDocument]:
        """Every live document of the space with its content, in path order."""
        ...

    async def prune_versions(self, space: SpaceRef) -> int:
        """Erases the space's kept versions beyond the retention; returns how many."""
        ...

    async def space_page(self, *, page_token: str, limit: int) -> tuple[list[SpaceRef], str]:
        """A page of every space holding documents, in space id order, and the token of the
        next ("" after the last)."""
        ...


class UsageReconciler(Protocol):
    """QuotaService's Reconcile, as the maintenance principal."""

    async def reconcile(self, tenant: str) -> ReconcileReport: ...


@dataclass(frozen=True)
class MaintenanceDeps:
    """The parts of a process the jobs are built on; the composition root fills it in
    `engram dev` (the embedded services) and in `engram serve maintenance` (StorageService
    and QuotaService over gRPC, NATS, OpenSearch and the vector index)."""

    storage: MaintenanceStorage
    quota: UsageReconciler
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
    """Where the worker finds the spaces to walk (MaintenanceStorage)."""

    async def space_page(self, *, page_token: str, limit: int) -> tuple[list[SpaceRef], str]: ...


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
