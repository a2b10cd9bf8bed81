"""MaintenanceDeps for job tests: from a running `engram dev` (EmbeddedEngram), or on
MongoDB as `engram serve maintenance` has them.

From `engram dev` they are the composition root's own (`engram.maintenance.deps`), with the
test's clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from engram.app.config import Components
from engram.app.embedded import EmbeddedEngram
from engram.authz.enforcement import PolicyAuthorizer
from engram.authz.mongo_audit import MongoAuditLog
from engram.backends.mongo import MongoDatabase
from engram.domain.principals import LOCAL_ADMIN, MAINTENANCE
from engram.domain.spaces import SpaceRef
from engram.indexer.service import ReindexQueue
from engram.indexes.ports import KeywordIndex, VectorIndex
from engram.maintenance.local_storage import LocalReconciler, LocalStorage
from engram.maintenance.ports import MaintenanceDeps
from engram.quota.mongo_ledger import MongoUsageLedger
from engram.quota.service import QuotaService
from engram.runtime.settings import Settings
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.ports import DocumentRepository
from engram.storage.service import StorageService, utc_now


@dataclass(frozen=True, kw_only=True)
class StoreDeps(MaintenanceDeps):
    """MaintenanceDeps (what the jobs see, through the maintenance ports) with the
    services behind them, which the tests use to set up and look at a space."""

    service: StorageService
    repository: DocumentRepository
    quota_service: QuotaService


def maintenance_deps(
    engram: EmbeddedEngram, *, clock: Callable[[], datetime] = utc_now
) -> StoreDeps:
    deps = replace(engram.maintenance.deps, clock=clock)
    return StoreDeps(
        **{f.name: getattr(deps, f.name) for f in fields(MaintenanceDeps)},
        service=engram.storage,
        repository=engram.repository,
        quota_service=engram.quota,
    )


class _NoRelay:
    def changed(self) -> None:
        """Events stay in the outbox; these tests do not need them published."""


def mongo_deps(
    database: MongoDatabase,
    settings: Settings,
    *,
    reindex: ReindexQueue,
    keyword: KeywordIndex,
    vector: VectorIndex,
    clock: Callable[[], datetime] = utc_now,
) -> StoreDeps:
    """MaintenanceDeps on MongoDB: StorageService and QuotaService in process on the
    database, reached through the in-process maintenance ports; the indexes and reindex
    queue given. (`engram serve maintenance` reaches the same services over gRPC.)"""
    components = Components.from_settings(settings)
    repository = MongoDocumentRepository(database, retention=components.version_retention)
    quota = QuotaService(
        MongoUsageLedger(database), components.quotas, repository, authorizer=PolicyAuthorizer()
    )
    storage = StorageService(
        repository,
        quota,
        PolicyAuthorizer(),
        MongoAuditLog(database),
        _NoRelay(),
        components.limits,
    )
    return StoreDeps(
        storage=LocalStorage(storage, MAINTENANCE),
        quota=LocalReconciler(quota, MAINTENANCE),
        reindex=reindex,
        keyword=keyword,
        vector=vector,
        principal=MAINTENANCE,
        clock=clock,
        service=storage,
        repository=repository,
        quota_service=quota,
    )


async def space_state(deps: StoreDeps, space: SpaceRef, *, indexes: bool = True) -> dict[str, Any]:
    """Everything a hygiene job could change in a space: its documents (version, sha256),
    their kept versions, its usage counters, and (unless `indexes` is False: an indexer
    may still be catching up) what both indexes hold for it."""
    repository = deps.repository
    listed = await repository.list_paths(
        space.id, directory="", start="", inclusive=True, limit=10_000
    )
    found = await repository.get_many(space.id, [entry.path for entry in listed])
    documents = list(found.values())
    state: dict[str, Any] = {
        "documents": {d.path: (d.version, d.sha256) for d in documents},
        "usage": await deps.quota_service.usage(space),
    }
    if indexes:
        state["keyword"] = await deps.keyword.indexed_documents(space.id)
        state["vector"] = await deps.vector.indexed_documents(space.id)
    for document in documents:
        versions = await repository.list_versions(
            space.id, document.path, before_seq=None, limit=1000
        )
        state[f"versions:{document.path}"] = [v.version for v in versions]
    return state


class Engram(Protocol):
    """Storage and its repository (an EmbeddedEngram)."""

    @property
    def storage(self) -> StorageService: ...

    @property
    def repository(self) -> DocumentRepository: ...


# An EmbeddedEngram or a StoreDeps.
Store = Engram | StoreDeps


def _service(store: Store) -> StorageService:
    return store.service if isinstance(store, StoreDeps) else store.storage


# The date the log-retention tests take as today.
TODAY = date(2026, 3, 10)


def log_path(days_ago: int) -> str:
    """The daily log of `days_ago` days before TODAY."""
    return f"daily/{(TODAY - timedelta(days=days_ago)).isoformat()}.md"


async def write(store: Store, space: SpaceRef, path: str, content: str) -> None:
    await _service(store).write(LOCAL_ADMIN, space, path, content)


async def content_of(store: Store, space: SpaceRef, path: str) -> str | None:
    document = await store.repository.get(space.id, path)
    return None if document is None else document.content
