"""`engram serve <service>`: one service per process on the production backends.

Production never falls back silently: a missing backend setting is a startup error that
names the variable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from engram.allinone import service_name
from engram.authz.enforcement import PolicyAuthorizer
from engram.authz.mongo_audit import MongoAuditLog
from engram.authz.mongo_tokens import MongoTokenStore
from engram.authz.service import AuthzService
from engram.authz.servicer import AuthzServicer
from engram.authz.tokens import (
    TokenAuthenticator,
    authenticator_from_settings,
    verifier_from_settings,
)
from engram.backends.mongo import MongoDatabase, connect
from engram.domain.errors import MissingSetting
from engram.events.jetstream import JetStreamPublisher
from engram.events.mongo_outbox import MongoOutbox
from engram.events.relay import OutboxRelay
from engram.quota.client import GrpcQuotaGate
from engram.quota.mongo_ledger import MongoUsageLedger
from engram.quota.service import QuotaService
from engram.quota.servicer import QuotaServicer
from engram.runtime.composition import document_limits, quota_defaults
from engram.runtime.interceptors import Authenticator
from engram.runtime.rate_limit import MongoRateLimitStore, RateLimitStore
from engram.runtime.server import GrpcServer, ServiceRegistration, stop_on_signals
from engram.runtime.settings import Settings
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.ports import QuotaGate
from engram.storage.service import StorageService
from engram.storage.servicer import StorageServicer
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
)

log = logging.getLogger(__name__)


def require(settings: Settings, *names: str) -> None:
    """Fails fast naming every missing ENGRAM_* variable."""
    missing = [f"ENGRAM_{name.upper()}" for name in names if not getattr(settings, name)]
    if missing:
        raise MissingSetting(
            f"missing setting{'s' if len(missing) > 1 else ''}: {', '.join(missing)} "
            "(production services never fall back to embedded backends)"
        )


class _NoEvents:
    def changed(self) -> None:
        """Events stay in the outbox (tests that do not publish)."""


async def _mongo(settings: Settings, stack: contextlib.AsyncExitStack) -> MongoDatabase:
    assert settings.mongo_uri is not None
    client, database = connect(settings.mongo_uri.get_secret_value(), settings.mongo_db)
    stack.push_async_callback(client.close)
    return database


async def _authenticator(
    settings: Settings, database: MongoDatabase, given: Authenticator | None
) -> Authenticator:
    if given is not None:
        return given
    return await authenticator_from_settings(settings, database)


async def _quota_gate(
    settings: Settings,
    database: MongoDatabase,
    repository: MongoDocumentRepository,
    stack: contextlib.AsyncExitStack,
) -> QuotaGate:
    """The remote QuotaService when ENGRAM_QUOTA_ADDR is set, else one in this process on
    the same MongoDB (the counters are atomic across processes either way)."""
    if settings.quota_addr:
        require(settings, "service_token")
        assert settings.service_token is not None
        channel = grpc.aio.insecure_channel(settings.quota_addr)
        stack.push_async_callback(channel.close)
        return GrpcQuotaGate(channel, settings.service_token.get_secret_value())
    ledger = MongoUsageLedger(database)
    await ledger.ensure_indexes()
    return QuotaService(ledger, quota_defaults(settings), repository)


@contextlib.asynccontextmanager
async def _serving(
    settings: Settings,
    registrations: list[ServiceRegistration],
    authenticator: Authenticator,
    stack: contextlib.AsyncExitStack,
    rate_limit_store: RateLimitStore | None = None,
) -> AsyncIterator[GrpcServer]:
    server = GrpcServer(settings, registrations, authenticator, rate_limit_store=rate_limit_store)
    await server.start()
    stack.push_async_callback(server.stop)
    yield server


@contextlib.asynccontextmanager
async def storage_on_mongo(
    settings: Settings,
    *,
    publish_events: bool = True,
    authenticator: Authenticator | None = None,
) -> AsyncIterator[GrpcServer]:
    """StorageService on MongoDB, publishing document events to NATS JetStream."""
    require(settings, "mongo_uri", *(["nats_url"] if publish_events else []))
    async with contextlib.AsyncExitStack() as stack:
        database = await _mongo(settings, stack)
        repository = MongoDocumentRepository(database, retention=settings.version_retention)
        audit = MongoAuditLog(database)
        for store in (repository, audit):
            await store.ensure_indexes()
        quota = await _quota_gate(settings, database, repository, stack)
        relay: OutboxRelay | None = None
        if publish_events:
            assert settings.nats_url is not None
            publisher = JetStreamPublisher(settings.nats_url, name="engram-storage")
            stack.push_async_callback(publisher.close)
            relay = OutboxRelay(MongoOutbox(repository), publisher)
        storage = StorageService(
            repository,
            quota,
            PolicyAuthorizer(),
            audit,
            relay or _NoEvents(),
            document_limits(settings),
        )
        registrations = [
            ServiceRegistration(
                service_name(storage_pb2, "StorageService"),
                lambda grpc_server: storage_pb2_grpc.add_StorageServiceServicer_to_server(
                    StorageServicer(storage), grpc_server
                ),
            )
        ]
        if relay is not None:
            relay.start()
            stack.push_async_callback(relay.stop)
        async with _serving(
            settings,
            registrations,
            await _authenticator(settings, database, authenticator),
            stack,
            MongoRateLimitStore(database),  # issue 13: import/export rate limits
        ) as server:
            yield server


@contextlib.asynccontextmanager
async def quota_on_mongo(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[GrpcServer]:
    """QuotaService on MongoDB (counters, overrides; documents for Reconcile)."""
    require(settings, "mongo_uri")
    async with contextlib.AsyncExitStack() as stack:
        database = await _mongo(settings, stack)
        ledger = MongoUsageLedger(database)
        await ledger.ensure_indexes()
        repository = MongoDocumentRepository(database, retention=settings.version_retention)
        quota = QuotaService(ledger, quota_defaults(settings), repository)
        registrations = [
            ServiceRegistration(
                service_name(quota_pb2, "QuotaService"),
                lambda grpc_server: quota_pb2_grpc.add_QuotaServiceServicer_to_server(
                    QuotaServicer(quota), grpc_server
                ),
            )
        ]
        async with _serving(
            settings,
            registrations,
            await _authenticator(settings, database, authenticator),
            stack,
        ) as server:
            yield server


@contextlib.asynccontextmanager
async def authz_on_mongo(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[GrpcServer]:
    """AuthzService on MongoDB (personal tokens, audit log)."""
    require(settings, "mongo_uri")
    async with contextlib.AsyncExitStack() as stack:
        database = await _mongo(settings, stack)
        store = MongoTokenStore(database)
        audit = MongoAuditLog(database)
        await audit.ensure_indexes()
        tokens = TokenAuthenticator(
            verifier_from_settings(settings), store, cache_seconds=settings.auth_cache_seconds
        )
        authz = AuthzService(
            tokens,
            store,
            audit,
            PolicyAuthorizer(),
            allow_act_as=settings.allow_act_as,  # issue 13
        )
        registrations = [
            ServiceRegistration(
                service_name(authz_pb2, "AuthzService"),
                lambda grpc_server: authz_pb2_grpc.add_AuthzServiceServicer_to_server(
                    AuthzServicer(authz), grpc_server
                ),
            )
        ]
        async with _serving(settings, registrations, authenticator or tokens, stack) as server:
            yield server


def _indexer(settings: Settings) -> contextlib.AbstractAsyncContextManager[GrpcServer]:
    # Imported on use: the indexer brings the index and embedding clients with it.
    from engram.indexer.production import indexer_on_backends

    return indexer_on_backends(settings)


def _search(settings: Settings) -> contextlib.AbstractAsyncContextManager[GrpcServer]:
    # Imported on use: search brings the index and embedding clients with it.
    from engram.search.production import search_on_backends

    return search_on_backends(settings)


SERVICES: dict[str, Callable[[Settings], contextlib.AbstractAsyncContextManager[GrpcServer]]] = {
    "storage": storage_on_mongo,
    "indexer": _indexer,
    "quota": quota_on_mongo,
    "authz": authz_on_mongo,
    "search": _search,
}


async def run_service(name: str, settings: Settings) -> None:
    """Serves one service until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    async with SERVICES[name](settings):
        stop_on_signals(stop.set)
        await stop.wait()
