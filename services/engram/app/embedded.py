"""`engram dev`: every service in one process on embedded backends.

State lives under one directory (the SQLite file, the tantivy and vector indexes) and
survives restarts. Documents reach the indexer through the outbox: the relay publishes
each batch in-process to the indexer's feed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from engram.app import registry
from engram.app.adapters import (
    embedded_vector_index,
    open_sqlite,
    tantivy_index,
    token_authenticator,
)
from engram.app.config import Components
from engram.app.maintenance import (
    JobFactory,
    Maintenance,
    MaintenanceStores,
    start_maintenance,
)
from engram.app.parts import (
    Indexing,
    build_indexing,
    build_search,
    build_workspace,
    start_switch,
)
from engram.authz.dev_identity import dev_token, load_or_create_secret
from engram.authz.enforcement import FixedPrincipalAuthenticator, PolicyAuthorizer
from engram.authz.service import AuthzService
from engram.authz.sqlite_audit import SqliteAuditLog
from engram.authz.sqlite_tokens import SqliteTokenStore
from engram.authz.tokens import TokenAuthenticator
from engram.backends.sqlite import SqliteDatabase
from engram.domain.principals import LOCAL_ADMIN, MAINTENANCE
from engram.events.inprocess import InProcessPublisher
from engram.events.relay import OutboxRelay
from engram.events.sqlite_feed import SqliteChangeFeed
from engram.indexer.embedding_cache import SqliteEmbeddingCache
from engram.indexer.outbox_feed import OutboxIndexHandler, OutboxReindexQueue
from engram.indexer.service import IndexerService
from engram.indexer.sources import RepositoryDocumentSource
from engram.indexes.progress import SqliteIndexProgress
from engram.maintenance.dream_watermarks import SqliteWatermarkStore
from engram.maintenance.local_storage import LocalReconciler, LocalStorage
from engram.maintenance.ports import MaintenanceDeps
from engram.maintenance.sqlite_stores import (
    SqliteJobRunStore,
    SqliteLeaseStore,
    SqliteSpaceSettingsStore,
)
from engram.quota.service import QuotaService
from engram.quota.sqlite_ledger import SqliteUsageLedger
from engram.runtime.interceptors import Authenticator
from engram.runtime.rate_limit import SqliteRateLimitStore
from engram.runtime.server import GrpcServer, serve
from engram.runtime.settings import Settings
from engram.runtime.tasks import cancel_and_wait
from engram.search.service import SearchService
from engram.storage.service import StorageService
from engram.storage.sqlite_outbox import SqliteOutbox
from engram.storage.sqlite_repository import SqliteDocumentRepository
from engram.workspace.agent_state import SqliteAgentState
from engram.workspace.local import LocalDocuments, LocalSearch
from engram.workspace.service import WorkspaceService, utc_now


@dataclass
class EmbeddedCore:
    """Storage, quota, authz and the event relay on one SQLite file."""

    settings: Settings
    components: Components
    database: SqliteDatabase
    repository: SqliteDocumentRepository
    storage: StorageService
    quota: QuotaService
    authorizer: PolicyAuthorizer
    authz: AuthzService
    publisher: InProcessPublisher
    relay: OutboxRelay
    feed: SqliteChangeFeed
    # Resolves JWTs (ENGRAM_JWT_SECRET or the data directory's secret) and personal tokens.
    tokens: TokenAuthenticator
    jwt_secret: str


@dataclass
class EmbeddedCoreServer:
    """A running server of the embedded core alone (`embedded_core_server`), and the pieces
    tests may inspect."""

    server: GrpcServer
    core: EmbeddedCore

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def settings(self) -> Settings:
        return self.core.settings

    @property
    def storage(self) -> StorageService:
        return self.core.storage

    @property
    def quota(self) -> QuotaService:
        return self.core.quota

    @property
    def relay(self) -> OutboxRelay:
        return self.core.relay

    @property
    def database(self) -> SqliteDatabase:
        return self.core.database

    @property
    def repository(self) -> SqliteDocumentRepository:
        return self.core.repository

    def admin_token(self) -> str:
        """The token `engram dev --auth` prints: the local admin, signed with this server's
        secret and carrying the audience and issuer it checks."""
        jwt = self.core.components.jwt
        return dev_token(self.core.jwt_secret, audience=jwt.audience, issuer=jwt.issuer)


@dataclass
class EmbeddedEngram(EmbeddedCoreServer):
    """The running all-in-one server and the pieces tests may inspect."""

    indexing: Indexing
    indexer: IndexerService
    search: SearchService
    workspace: WorkspaceService
    maintenance: Maintenance


async def build_core(settings: Settings, stack: contextlib.AsyncExitStack) -> EmbeddedCore:
    """Storage, quota, authz and the (not yet started) relay on the embedded database."""
    components = Components.from_settings(settings)
    database = await open_sqlite(settings, stack)
    repository = SqliteDocumentRepository(database, retention=components.version_retention)
    authorizer = PolicyAuthorizer()
    quota = QuotaService(
        SqliteUsageLedger(database), components.quotas, repository, authorizer=authorizer
    )
    audit = SqliteAuditLog(database)
    publisher = InProcessPublisher()
    relay = OutboxRelay(SqliteOutbox(database), publisher)
    feed = SqliteChangeFeed(database, components.feed)
    # First subscriber: watchers wake before the indexer's (slower) handler runs.
    publisher.subscribe(feed.published)
    storage = StorageService(
        repository,
        quota,
        authorizer,
        audit,
        relay,
        components.limits,
        feed=feed,
        max_watchers=components.max_watchers,
    )
    secret = components.jwt.secret or load_or_create_secret(settings.data_dir)
    token_store = SqliteTokenStore(database)
    tokens = token_authenticator(components.jwt, token_store, secret=secret)
    authz = AuthzService(
        tokens, token_store, audit, authorizer, allow_act_as=components.allow_act_as
    )
    return EmbeddedCore(
        settings,
        components,
        database,
        repository,
        storage,
        quota,
        authorizer,
        authz,
        publisher,
        relay,
        feed,
        tokens,
        secret,
    )


def _authenticator(
    core: EmbeddedCore, authenticator: Authenticator | None, require_auth: bool
) -> Authenticator:
    return authenticator or (
        core.tokens if require_auth else FixedPrincipalAuthenticator(LOCAL_ADMIN)
    )


@contextlib.asynccontextmanager
async def embedded_core_server(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    require_auth: bool = False,
) -> AsyncIterator[EmbeddedCoreServer]:
    """StorageService, QuotaService and AuthzService as `engram dev` serves them (the same
    core, relay, change feed and rate limits on its SQLite file), without the indexes,
    search, workspace and maintenance: the embedded counterpart of `storage_on_mongo` and
    its siblings, for the suites of those three services. Change events reach only the
    change feed. It starts without a model or an index to open. Auth as `embedded_engram`."""
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(settings, stack)
        _start_core_background(core, stack)
        server = GrpcServer(
            settings,
            [
                registry.storage(core.storage),
                registry.quota(core.quota, core.authorizer),
                registry.authz(core.authz),
            ],
            _authenticator(core, authenticator, require_auth),
            rate_limit_store=SqliteRateLimitStore(core.database),
        )
        await serve(server, stack)
        yield EmbeddedCoreServer(server, core)


@contextlib.asynccontextmanager
async def embedded_engram(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    require_auth: bool = False,
    clock: Callable[[], datetime] = utc_now,
    maintenance_jobs: JobFactory | None = None,
) -> AsyncIterator[EmbeddedEngram]:
    """Starts the all-in-one server; stops it and closes every backend on exit.

    Without `require_auth` (and no `authenticator`) every caller is the implicit local admin
    of tenant `local`; with it, callers need a JWT or a personal access token. Health says
    SERVING only once the indexes are open and both embedders have run once. `clock` is the
    workspace's and the maintenance worker's (daily log dates and times, when jobs are due;
    tests move it). `maintenance_jobs` builds other maintenance jobs than the configured
    ones (tests).
    """
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(settings, stack)
        components = core.components
        source = RepositoryDocumentSource(core.repository)
        # One store for the worker and search: a record wakes the searches waiting on it.
        progress = SqliteIndexProgress(core.database)
        indexing = await build_indexing(
            components,
            stack,
            keyword=tantivy_index(settings),
            vector=embedded_vector_index(settings),
            cache=SqliteEmbeddingCache(core.database),
            source=source,
            sole_owner=True,
            progress=progress,
        )
        outbox = SqliteOutbox(core.database)
        reindex = OutboxReindexQueue(core.repository, core.relay, outbox)
        index_handler = OutboxIndexHandler(
            indexing.worker, max_attempts=components.indexing.max_attempts
        )
        indexer = _indexer(core, indexing, source, reindex, outbox, index_handler)
        search = await build_search(
            components,
            stack,
            keyword=indexing.keyword,
            vector=indexing.vector,
            authorizer=core.authorizer,
            progress=progress,
        )
        # The feed subscribes before the relay starts: no event is published to nobody.
        core.publisher.subscribe(index_handler)
        rate_limits = SqliteRateLimitStore(core.database)
        workspace = build_workspace(
            components,
            documents=LocalDocuments(core.storage),
            search=LocalSearch(search),
            authorizer=core.authorizer,
            rate_limits=rate_limits,
            agents=SqliteAgentState(core.database),
            clock=clock,
        )
        _start_background(core, indexing, stack)
        maintenance = _start_maintenance(
            settings, core, indexing, reindex, clock, stack, maintenance_jobs
        )
        server = GrpcServer(
            settings,
            [
                registry.storage(core.storage),
                registry.quota(core.quota, core.authorizer),
                registry.authz(core.authz),
                registry.indexer(indexer),
                registry.search(search),
                registry.workspace(workspace),
                registry.maintenance(maintenance.service),
            ],
            _authenticator(core, authenticator, require_auth),
            rate_limit_store=rate_limits,
        )
        await serve(server, stack)
        yield EmbeddedEngram(server, core, indexing, indexer, search, workspace, maintenance)


def _indexer(
    core: EmbeddedCore,
    indexing: Indexing,
    source: RepositoryDocumentSource,
    reindex: OutboxReindexQueue,
    outbox: SqliteOutbox,
    index_handler: OutboxIndexHandler,
) -> IndexerService:
    """IndexerService over the outbox: its backlog and indexed total come from the handler."""

    async def backlog() -> int:
        # Per event: the batch under way counts down as its documents are indexed.
        return await outbox.backlog(excluding=index_handler.indexed_in_flight())

    async def indexed_total() -> int:
        return index_handler.indexed_total

    return IndexerService(
        core.authorizer,
        source,
        reindex,
        indexing.models,
        indexing.vector,
        backlog=backlog,
        switch_progress=indexing.switch_progress,
        indexed_total=indexed_total,
        progress=indexing.progress,
    )


def _start_maintenance(
    settings: Settings,
    core: EmbeddedCore,
    indexing: Indexing,
    reindex: OutboxReindexQueue,
    clock: Callable[[], datetime],
    stack: contextlib.AsyncExitStack,
    jobs: JobFactory | None,
) -> Maintenance:
    """The maintenance worker over the local stores, stopped with `stack`."""
    return start_maintenance(
        settings,
        MaintenanceDeps(
            storage=LocalStorage(core.storage, MAINTENANCE),
            quota=LocalReconciler(core.quota, MAINTENANCE),
            reindex=reindex,
            keyword=indexing.keyword,
            vector=indexing.vector,
            principal=MAINTENANCE,
            clock=clock,
            max_indexing_lag=timedelta(seconds=settings.backfill_max_indexing_lag_seconds),
        ),
        MaintenanceStores(
            SqliteLeaseStore(core.database, clock=clock),
            SqliteJobRunStore(core.database),
            SqliteSpaceSettingsStore(core.database),
            SqliteWatermarkStore(core.database),
        ),
        SqliteAuditLog(core.database),
        stack,
        jobs=jobs,
    )


def _start_background(
    core: EmbeddedCore, indexing: Indexing, stack: contextlib.AsyncExitStack
) -> None:
    """Starts the outbox relay, the change feed's retention and any model switch under way;
    each stops with `stack`."""
    _start_core_background(core, stack)
    start_switch(indexing, stack)


def _start_core_background(core: EmbeddedCore, stack: contextlib.AsyncExitStack) -> None:
    """Starts the outbox relay and the change feed's retention; each stops with `stack`."""
    core.relay.start()
    stack.push_async_callback(core.relay.stop)
    retention = asyncio.create_task(core.feed.run_retention(), name="feed-retention")
    stack.push_async_callback(cancel_and_wait, retention)
