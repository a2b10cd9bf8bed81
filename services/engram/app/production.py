"""`engram serve <service>`: one service per process on the production backends.

Production never falls back silently: missing backend settings are one startup error that
names every missing variable. Each process probes the backends its service needs in the
background; health is NOT_SERVING while one of them does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import grpc

from engram.app import registry
from engram.app.adapters import (
    authz_token_authenticator,
    connect_mongo,
    either_index_dependency,
    mongo_dependency,
    mongo_token_authenticator,
    nats_dependency,
    opensearch_dependency,
    opensearch_index,
    token_authenticator,
    vector_dependency,
    vector_index,
)
from engram.app.config import (
    Components,
    IndexerClientNeeds,
    MaintenanceClientNeeds,
    MongoNeeds,
    NatsNeeds,
    Needs,
    OpenSearchNeeds,
    QuotaClientNeeds,
    Required,
    StorageClientNeeds,
    WorkspaceClientNeeds,
    require,
)
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
from engram.authz.enforcement import PolicyAuthorizer
from engram.authz.mongo_audit import MongoAuditLog
from engram.authz.mongo_tokens import MongoTokenStore
from engram.authz.remote_audit import AuthzServiceAuditSink
from engram.authz.service import AuthzService
from engram.authz.tokens import TokenAuthenticator
from engram.backends.mongo import MongoDatabase
from engram.client.aio import EngramClient
from engram.domain.errors import MissingSetting
from engram.domain.ports import AuditSink
from engram.domain.principals import MAINTENANCE
from engram.events.jetstream import JetStreamPublisher, connect_nats
from engram.events.jetstream_feed import JetStreamChangeFeed
from engram.events.relay import OutboxRelay
from engram.indexer.embedding_cache import MongoIdEmbeddingCache
from engram.indexer.jetstream_consumer import JetStreamIndexConsumer, JetStreamReindexQueue
from engram.indexer.service import IndexerService
from engram.indexer.sources import StorageClientDocumentSource
from engram.indexes.ports import VectorIndex
from engram.indexes.progress import MongoIndexProgress, ProgressReader
from engram.maintenance.dream_watermarks import MongoWatermarkStore
from engram.maintenance.mongo_stores import (
    MongoJobRunStore,
    MongoLeaseStore,
    MongoSpaceSettingsStore,
)
from engram.maintenance.ports import MaintenanceDeps, utc_now
from engram.maintenance.remote_storage import RemoteReconciler, RemoteStorage
from engram.quota.client import GrpcQuotaGate
from engram.quota.mongo_ledger import MongoUsageLedger
from engram.quota.ports import StoredUsage
from engram.quota.remote_stored import StorageServiceStoredUsage
from engram.quota.service import QuotaService
from engram.runtime.channels import open_channel
from engram.runtime.gc_pauses import freeze_startup_heap
from engram.runtime.health import Dependency
from engram.runtime.interceptors import Authenticator
from engram.runtime.malloc_tuning import keep_large_allocations_mapped
from engram.runtime.rate_limit import MongoRateLimitStore, RateLimitStore
from engram.runtime.server import GrpcServer, ServiceRegistration, serve, stop_on_signals
from engram.runtime.settings import Settings
from engram.runtime.tracing import tracing_client_interceptors
from engram.search.indexer_progress import IndexerIndexProgress
from engram.search.reopen import open_or_keep_trying
from engram.storage.mongo.outbox import MongoOutbox
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.ports import QuotaGate
from engram.storage.service import StorageService
from engram.workspace.agent_state import MongoAgentState
from engram.workspace.remote import RemoteDocuments, RemoteSearch

log = logging.getLogger(__name__)


class _NoEvents:
    def changed(self) -> None:
        """Events stay in the outbox (tests that do not publish)."""


@dataclass
class _OnMongo:
    """A process whose one service lives on MongoDB; health follows MongoDB."""

    settings: Settings
    required: Required
    components: Components
    database: MongoDatabase
    stack: contextlib.AsyncExitStack

    async def serve(
        self,
        registration: ServiceRegistration,
        authenticator: Authenticator,
        *,
        rate_limit_store: RateLimitStore | None = None,
    ) -> GrpcServer:
        server = GrpcServer(
            self.settings,
            [registration],
            authenticator,
            [mongo_dependency(self.database)],
            rate_limit_store=rate_limit_store,
        )
        return await serve(server, self.stack)


async def _process_tokens(process: _OnMongo) -> TokenAuthenticator:
    """The token authenticator of a process on MongoDB (not AuthzService's: a function,
    not a method of _OnMongo, so the settings reference sees who reads ENGRAM_AUTHZ_ADDR)."""
    return await _tokens(process.settings, process.components, process.database, process.stack)


async def _tokens(
    settings: Settings,
    components: Components,
    database: MongoDatabase | None,
    stack: contextlib.AsyncExitStack,
) -> TokenAuthenticator:
    """Personal tokens from AuthzService at ENGRAM_AUTHZ_ADDR (the chart's way: only
    AuthzService reads its collection), else from this process's MongoDB (which a process
    without ENGRAM_AUTHZ_ADDR must have)."""
    if settings.authz_addr:
        return authz_token_authenticator(components, settings.authz_addr, stack)
    if database is None:
        raise AssertionError("tokens are read on MongoDB but the process has none")
    return await mongo_token_authenticator(components, database)


@contextlib.asynccontextmanager
async def _on_mongo(
    settings: Settings, needs: Sequence[type[Needs]] = ()
) -> AsyncIterator[_OnMongo]:
    required = require(settings, [MongoNeeds, *needs])
    components = Components.from_settings(settings)
    async with contextlib.AsyncExitStack() as stack:
        database = connect_mongo(required[MongoNeeds], settings, stack)
        yield _OnMongo(settings, required, components, database, stack)


@dataclass
class _MongoStorage:
    """StorageService on MongoDB with what it is built on."""

    repository: MongoDocumentRepository
    storage: StorageService


async def _mongo_storage(
    process: _OnMongo, *, publish_events: bool, name: str, watchable: bool = False
) -> _MongoStorage:
    """StorageService on the process's MongoDB: events through the outbox relay to NATS
    JetStream (started; stopped with the process), quota in this process on the same MongoDB
    or at ENGRAM_QUOTA_ADDR. Needs NatsNeeds (with events) and QuotaClientNeeds (with
    ENGRAM_QUOTA_ADDR) in the process's requirements. `watchable`: WatchSpace reads the
    events the relay published from JetStream (without NATS it answers UNAVAILABLE)."""
    database, components, stack = process.database, process.components, process.stack
    settings = process.settings
    repository = MongoDocumentRepository(database, retention=components.version_retention)
    await repository.ensure_indexes()
    token = settings.service_token.get_secret_value() if settings.service_token else ""
    audit = await _audit_sink(process, token)
    quota: QuotaGate
    if settings.quota_addr:
        remote = process.required[QuotaClientNeeds]
        channel = open_channel(
            remote.quota_addr, components.channels, interceptors=tracing_client_interceptors()
        )
        stack.push_async_callback(channel.close)
        quota = GrpcQuotaGate(channel, remote.service_token.get_secret_value())
    else:
        quota = await _mongo_quota(process, repository)
    relay: OutboxRelay | None = None
    feed: JetStreamChangeFeed | None = None
    if publish_events:
        nats_url = process.required[NatsNeeds].nats_url
        publisher = JetStreamPublisher(nats_url, name=name)
        stack.push_async_callback(publisher.close)
        relay = OutboxRelay(MongoOutbox(repository), publisher)
        if watchable:
            feed = JetStreamChangeFeed(nats_url, name=f"{name}-feed")
            stack.push_async_callback(feed.close)
    storage = StorageService(
        repository,
        quota,
        PolicyAuthorizer(),
        audit,
        relay or _NoEvents(),
        components.limits,
        feed=feed,
        max_watchers=components.max_watchers,
    )
    if relay is not None:
        relay.start()
        stack.push_async_callback(relay.stop)
    return _MongoStorage(repository, storage)


async def _mongo_quota(process: _OnMongo, stored: StoredUsage) -> QuotaService:
    """QuotaService with its counters on the process's MongoDB; what the documents hold
    from `stored` (storage's repository in storage's process, StorageService elsewhere)."""
    ledger = MongoUsageLedger(process.database)
    await ledger.ensure_indexes()
    return QuotaService(ledger, process.components.quotas, stored, authorizer=PolicyAuthorizer())


def _storage_needs(settings: Settings, *, publish_events: bool) -> list[type[Needs]]:
    needs: list[type[Needs]] = []
    if publish_events:
        needs.append(NatsNeeds)
    if settings.quota_addr:
        needs.append(QuotaClientNeeds)
    return needs


@contextlib.asynccontextmanager
async def storage_on_mongo(
    settings: Settings,
    *,
    publish_events: bool = True,
    authenticator: Authenticator | None = None,
) -> AsyncIterator[GrpcServer]:
    """StorageService on MongoDB, publishing document events to NATS JetStream; quota in
    this process on the same MongoDB, or the QuotaService at ENGRAM_QUOTA_ADDR. Writes need
    MongoDB only: while NATS is away events wait in the outbox."""
    needs = _storage_needs(settings, publish_events=publish_events)
    async with _on_mongo(settings, needs) as process:
        built = await _mongo_storage(
            process, publish_events=publish_events, name="engram-storage", watchable=True
        )
        yield await process.serve(
            registry.storage(built.storage),
            authenticator or await _process_tokens(process),
            # Import and export rate limits, shared by the replicas.
            rate_limit_store=MongoRateLimitStore(process.database),
        )


@contextlib.asynccontextmanager
async def quota_on_mongo(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[GrpcServer]:
    """QuotaService on MongoDB (counters, overrides, orgs); what the documents hold
    (Reconcile, a space's document count) from StorageService at ENGRAM_STORAGE_ADDR as the
    service principal of ENGRAM_SERVICE_TOKEN: quota never reads storage's collections."""
    async with _on_mongo(settings, [StorageClientNeeds]) as process:
        remote = process.required[StorageClientNeeds]
        channel = open_channel(
            remote.storage_addr,
            process.components.channels,
            interceptors=tracing_client_interceptors(),
        )
        process.stack.push_async_callback(channel.close)
        stored = StorageServiceStoredUsage(channel, remote.service_token.get_secret_value())
        quota = await _mongo_quota(process, stored)
        yield await process.serve(
            registry.quota(quota, PolicyAuthorizer()),
            authenticator or await _process_tokens(process),
        )


@contextlib.asynccontextmanager
async def authz_on_mongo(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[GrpcServer]:
    """AuthzService on MongoDB (personal tokens, audit log)."""
    async with _on_mongo(settings) as process:
        store = MongoTokenStore(process.database)
        audit = MongoAuditLog(process.database)
        await store.ensure_indexes()
        await audit.ensure_indexes()
        # Named apart from _OnMongo.tokens: AuthzService reads the tokens it owns itself.
        own_tokens = token_authenticator(process.components.jwt, store)
        authz = AuthzService(
            own_tokens,
            store,
            audit,
            PolicyAuthorizer(),
            allow_act_as=process.components.allow_act_as,
        )
        yield await process.serve(registry.authz(authz), authenticator or own_tokens)


@dataclass
class ProductionIndexer:
    """The running parts of `engram serve indexer` (benchmarks and tests look inside)."""

    server: GrpcServer
    indexing: Indexing
    consumer: JetStreamIndexConsumer
    service: IndexerService

    @property
    def keyword(self) -> object:
        return self.indexing.keyword

    @property
    def vector(self) -> VectorIndex:
        return self.indexing.vector

    @property
    def embedder(self) -> object:
        return self.indexing.embedder


@contextlib.asynccontextmanager
async def open_indexer(settings: Settings) -> AsyncIterator[ProductionIndexer]:
    """The indexer: JetStream consumer, worker, model switch and IndexerService. Reads and
    lists documents through StorageService as a service principal; writes OpenSearch and
    the vector index (Qdrant, Qdrant local mode, or the embedded index at
    ENGRAM_VECTOR_DIR). Its own MongoDB holds only what it owns: the embedding cache and
    the progress rows, which search reads through GetIndexProgress."""
    required = require(
        settings,
        [NatsNeeds, MongoNeeds, OpenSearchNeeds, StorageClientNeeds],
        vector=True,
    )
    components = Components.from_settings(settings)
    nats_url = required[NatsNeeds].nats_url
    storage_client = required[StorageClientNeeds]
    async with contextlib.AsyncExitStack() as stack:
        database = connect_mongo(required[MongoNeeds], settings, stack)
        cache = MongoIdEmbeddingCache(database)
        await cache.ensure_indexes()
        keyword = opensearch_index(required[OpenSearchNeeds].opensearch_url, settings)
        vector = vector_index(required.vector)
        source = _storage_source(storage_client, components, stack)
        progress = MongoIndexProgress(database)
        await progress.ensure_indexes()
        indexing = await build_indexing(
            components,
            stack,
            keyword=keyword,
            vector=vector,
            cache=cache,
            source=source,
            sole_owner=False,
            progress=progress,
        )
        nats_client = await connect_nats(nats_url, name="engram-indexer")
        stack.push_async_callback(nats_client.close)
        publisher = JetStreamPublisher(nats_url, name="engram-indexer-reindex")
        stack.push_async_callback(publisher.close)
        consumer = JetStreamIndexConsumer(nats_client, indexing.worker, components.consumer)
        service = IndexerService(
            PolicyAuthorizer(),
            source,
            JetStreamReindexQueue(publisher, durable=components.consumer.durable),
            indexing.models,
            vector,
            backlog=consumer.backlog,
            switch_progress=indexing.switch_progress,
            indexed_total=consumer.indexed_total,
            progress=progress,
        )
        dependencies = [
            mongo_dependency(database),
            nats_dependency(nats_client),
            opensearch_dependency(keyword),
        ]
        vector_probe = vector_dependency(vector)
        if vector_probe is not None:
            dependencies.append(vector_probe)
        server = GrpcServer(
            settings,
            [registry.indexer(service)],
            await _tokens(settings, components, database, stack),
            dependencies,
        )
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        start_switch(indexing, stack)
        await serve(server, stack)
        log.info(
            "indexer running",
            extra={
                "model": indexing.models.configured.model_id,
                "active": getattr(indexing.models.active, "model_id", None),
                "pending": getattr(indexing.models.pending, "model_id", None),
            },
        )
        yield ProductionIndexer(server, indexing, consumer, service)


def _storage_source(
    storage_client: StorageClientNeeds,
    components: Components,
    stack: contextlib.AsyncExitStack,
) -> StorageClientDocumentSource:
    """Documents read and listed through StorageService (as a service principal) over a
    channel that closes with `stack`: the indexer never reads storage's database."""
    channel = open_channel(
        storage_client.storage_addr,
        components.channels,
        interceptors=tracing_client_interceptors(),
    )
    stack.push_async_callback(channel.close)
    return StorageClientDocumentSource(channel, storage_client.service_token.get_secret_value())


@contextlib.asynccontextmanager
async def indexer_on_backends(settings: Settings) -> AsyncIterator[GrpcServer]:
    async with open_indexer(settings) as indexer:
        yield indexer.server


@contextlib.asynccontextmanager
async def search_on_backends(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    vector: VectorIndex | None = None,
    reuse_port: bool = False,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> AsyncIterator[GrpcServer]:
    """SearchService on OpenSearch and the vector index the settings choose (as the
    indexer does: Qdrant, Qdrant local mode or ENGRAM_VECTOR_DIR).

    `reuse_port` and `interceptors`: one of several worker processes sharing the port
    (engram.app.workers).

    Personal tokens come from AuthzService at ENGRAM_AUTHZ_ADDR and index progress from the
    indexer at ENGRAM_INDEXER_ADDR (both as the service principal of ENGRAM_SERVICE_TOKEN):
    with both set, search reads no database but its indexes and needs no ENGRAM_MONGO_URI.
    Without them it reads either from MongoDB (the shared-database way). `authenticator`
    replaces the token authenticator; `vector` replaces the configured vector index. An
    index that does not answer at startup does not stop the service: searches degrade to
    the other index meanwhile, so health is NOT_SERVING only while neither index answers
    (or MongoDB, when search reads tokens there).
    """
    needs: list[type[Needs]] = [OpenSearchNeeds]
    if settings.indexer_addr:
        needs.append(IndexerClientNeeds)
    tokens_on_mongo = authenticator is None and not settings.authz_addr
    if tokens_on_mongo:
        needs.append(MongoNeeds)
    required = require(settings, needs, vector=vector is None)
    components = Components.from_settings(settings)
    async with contextlib.AsyncExitStack() as stack:
        dependencies: list[Dependency] = []
        database: MongoDatabase | None = None
        if tokens_on_mongo:
            database = connect_mongo(required[MongoNeeds], settings, stack)
            dependencies.append(mongo_dependency(database))
        elif settings.mongo_uri and not settings.indexer_addr:
            # Tokens come from elsewhere; the indexer's progress rows are read on MongoDB.
            database = connect_mongo(MongoNeeds(mongo_uri=settings.mongo_uri), settings, stack)
        if authenticator is None:
            authenticator = await _tokens(settings, components, database, stack)
        progress = _search_progress(settings, required, components, database, stack)
        keyword = opensearch_index(required[OpenSearchNeeds].opensearch_url, settings)
        await open_or_keep_trying(keyword, "keyword", stack)
        if vector is None:
            vector = vector_index(required.vector)
        await open_or_keep_trying(vector, "vector", stack)
        service = await build_search(
            components,
            stack,
            keyword=keyword,
            vector=vector,
            authorizer=PolicyAuthorizer(),
            progress=progress,
        )
        indexes = either_index_dependency(keyword, vector)
        if indexes is not None:
            dependencies.append(indexes)
        server = GrpcServer(
            settings,
            [registry.search(service)],
            authenticator,
            dependencies,
            reuse_port=reuse_port,
            interceptors=interceptors,
        )
        yield await serve(server, stack)


def _search_progress(
    settings: Settings,
    required: Required,
    components: Components,
    database: MongoDatabase | None,
    stack: contextlib.AsyncExitStack,
) -> ProgressReader | None:
    """Where search reads the indexer's progress: its GetIndexProgress at
    ENGRAM_INDEXER_ADDR, else the indexer's rows on MongoDB, else nowhere (searches given
    positions answer degraded, saying so)."""
    if settings.indexer_addr:
        remote = required[IndexerClientNeeds]
        channel = open_channel(
            remote.indexer_addr, components.channels, interceptors=tracing_client_interceptors()
        )
        stack.push_async_callback(channel.close)
        client = EngramClient(channel=channel, token=remote.service_token.get_secret_value())
        return IndexerIndexProgress(client)
    if database is not None:
        return MongoIndexProgress(database)
    return None


@contextlib.asynccontextmanager
async def workspace_on_mongo(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[GrpcServer]:
    """WorkspaceService alone: documents through StorageService at ENGRAM_STORAGE_ADDR and
    search through SearchService at ENGRAM_SEARCH_ADDR, both as the service principal of
    ENGRAM_SERVICE_TOKEN; tokens, write counters and SOUL.md baselines on MongoDB, so every
    replica shares them."""
    async with _on_mongo(settings, [WorkspaceClientNeeds]) as process:
        remote = process.required[WorkspaceClientNeeds]
        token = remote.service_token.get_secret_value()
        channels = {}
        for name, addr in (("storage", remote.storage_addr), ("search", remote.search_addr)):
            channels[name] = open_channel(
                addr, process.components.channels, interceptors=tracing_client_interceptors()
            )
            process.stack.push_async_callback(channels[name].close)
        agents = MongoAgentState(process.database)
        await agents.ensure_indexes()
        workspace = build_workspace(
            process.components,
            documents=RemoteDocuments(channels["storage"], token),
            search=RemoteSearch(channels["search"], token),
            authorizer=PolicyAuthorizer(),
            rate_limits=MongoRateLimitStore(process.database),
            agents=agents,
        )
        yield await process.serve(
            registry.workspace(workspace), authenticator or await _process_tokens(process)
        )


@dataclass
class ProductionMaintenance:
    """The running parts of `engram serve maintenance` (tests look inside)."""

    server: GrpcServer
    maintenance: Maintenance
    deps: MaintenanceDeps


@contextlib.asynccontextmanager
async def open_maintenance(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    jobs: JobFactory | None = None,
) -> AsyncIterator[ProductionMaintenance]:
    """The maintenance worker and MaintenanceService. Jobs act through StorageService at
    ENGRAM_STORAGE_ADDR and reconcile through QuotaService at ENGRAM_QUOTA_ADDR, as the
    service principal of ENGRAM_SERVICE_TOKEN (this process opens no document repository
    and no outbox: storage's collections are storage's); they read OpenSearch and the vector
    index the settings choose, and re-queue documents for the indexer on JetStream. Leases,
    runs, settings and watermarks live on this process's MongoDB, so replicas share them;
    its audit rows go to AuthzService when ENGRAM_AUTHZ_ADDR is set. `jobs` builds other
    jobs than the configured ones (tests)."""
    needs: list[type[Needs]] = [OpenSearchNeeds, NatsNeeds, MaintenanceClientNeeds]
    # One error naming every missing setting, the vector index's included.
    vectors = require(settings, [MongoNeeds, *needs], vector=True).vector
    async with _on_mongo(settings, needs) as process:
        stack, database = process.stack, process.database
        remote = process.required[MaintenanceClientNeeds]
        token = remote.service_token.get_secret_value()
        channels = {}
        for name, addr in (("storage", remote.storage_addr), ("quota", remote.quota_addr)):
            channels[name] = open_channel(
                addr, process.components.channels, interceptors=tracing_client_interceptors()
            )
            stack.push_async_callback(channels[name].close)
        audit = await _audit_sink(process, token)
        keyword = opensearch_index(process.required[OpenSearchNeeds].opensearch_url, settings)
        await open_or_keep_trying(keyword, "keyword", stack)
        vector = vector_index(vectors)
        await open_or_keep_trying(vector, "vector", stack)
        publisher = JetStreamPublisher(
            process.required[NatsNeeds].nats_url, name="engram-maintenance-reindex"
        )
        stack.push_async_callback(publisher.close)
        deps = MaintenanceDeps(
            storage=RemoteStorage(channels["storage"], token),
            quota=RemoteReconciler(channels["quota"], token),
            reindex=JetStreamReindexQueue(publisher, durable=settings.indexer_durable),
            keyword=keyword,
            vector=vector,
            principal=MAINTENANCE,
            clock=utc_now,
            max_indexing_lag=timedelta(seconds=settings.backfill_max_indexing_lag_seconds),
        )
        leases = MongoLeaseStore(database)
        runs = MongoJobRunStore(database)
        watermarks = MongoWatermarkStore(database)
        for store in (leases, runs, watermarks):
            await store.ensure_indexes()
        maintenance = start_maintenance(
            settings,
            deps,
            MaintenanceStores(leases, runs, MongoSpaceSettingsStore(database), watermarks),
            audit,
            stack,
            jobs=jobs,
        )
        dependencies = [mongo_dependency(database)]
        indexes = either_index_dependency(keyword, vector)
        if indexes is not None:
            dependencies.append(indexes)
        server = GrpcServer(
            settings,
            [registry.maintenance(maintenance.service)],
            authenticator or await _process_tokens(process),
            dependencies,
        )
        await serve(server, stack)
        yield ProductionMaintenance(server, maintenance, deps)


async def _audit_sink(process: _OnMongo, token: str) -> AuditSink:
    """Where a service's audit rows go (storage's global writes, maintenance's settings
    changes): AuthzService at ENGRAM_AUTHZ_ADDR, which owns the audit log and lists it, as
    the service principal of `token`; else this process's MongoDB (one shared database)."""
    if process.settings.authz_addr:
        if not token:
            raise MissingSetting(
                "missing setting: ENGRAM_SERVICE_TOKEN (required with ENGRAM_AUTHZ_ADDR: "
                "this service records its audit rows at AuthzService as the service principal)"
            )
        channel = open_channel(
            process.settings.authz_addr,
            process.components.channels,
            interceptors=tracing_client_interceptors(),
        )
        process.stack.push_async_callback(channel.close)
        return AuthzServiceAuditSink(channel, token)
    audit = MongoAuditLog(process.database)
    await audit.ensure_indexes()
    return audit


@contextlib.asynccontextmanager
async def maintenance_on_backends(settings: Settings) -> AsyncIterator[GrpcServer]:
    async with open_maintenance(settings) as running:
        yield running.server


PROCESSES: dict[str, Callable[[Settings], contextlib.AbstractAsyncContextManager[GrpcServer]]] = {
    "storage": storage_on_mongo,
    "quota": quota_on_mongo,
    "authz": authz_on_mongo,
    "indexer": indexer_on_backends,
    "search": search_on_backends,
    "workspace": workspace_on_mongo,
    "maintenance": maintenance_on_backends,
}


async def run_service(name: str, settings: Settings) -> None:
    """Serves one service until SIGTERM or SIGINT."""
    keep_large_allocations_mapped()
    stop = asyncio.Event()
    async with PROCESSES[name](settings):
        freeze_startup_heap()
        stop_on_signals(stop.set)
        await stop.wait()
