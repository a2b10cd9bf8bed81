"""`engram serve <service>`: one service per process on the production backends.

Production never falls back silently: a missing backend setting is a startup error that
names the variable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from engram.authz.enforcement import PolicyAuthorizer
from engram.authz.mongo_audit import MongoAuditLog
from engram.backends.mongo import connect
from engram.domain.errors import EngramError
from engram.events.jetstream import JetStreamPublisher
from engram.events.mongo_outbox import MongoOutbox
from engram.events.relay import OutboxRelay
from engram.quota.mongo_ledger import MongoUsageLedger
from engram.quota.service import QuotaService
from engram.runtime.composition import document_limits, quota_defaults
from engram.runtime.interceptors import Authenticator
from engram.runtime.server import GrpcServer, ServiceRegistration, stop_on_signals
from engram.runtime.settings import Settings
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.service import StorageService
from engram.storage.servicer import StorageServicer
from engram.v1 import storage_pb2, storage_pb2_grpc

log = logging.getLogger(__name__)


class MissingSetting(EngramError):
    reason = "MISSING_SETTING"


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


@contextlib.asynccontextmanager
async def storage_on_mongo(
    settings: Settings,
    *,
    publish_events: bool = True,
    authenticator: Authenticator | None = None,
) -> AsyncIterator[GrpcServer]:
    """StorageService on MongoDB, publishing document events to NATS JetStream."""
    require(settings, "mongo_uri", *(["nats_url"] if publish_events else []))
    assert settings.mongo_uri is not None
    client, database = connect(settings.mongo_uri.get_secret_value(), settings.mongo_db)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(client.close)
        repository = MongoDocumentRepository(database, retention=settings.version_retention)
        ledger = MongoUsageLedger(database)
        audit = MongoAuditLog(database)
        for store in (repository, ledger, audit):
            await store.ensure_indexes()
        quota = QuotaService(ledger, quota_defaults(settings), repository)
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
        if authenticator is None:
            from engram.authz.tokens import authenticator_from_settings

            authenticator = await authenticator_from_settings(settings, database)
        server = GrpcServer(
            settings,
            [
                ServiceRegistration(
                    storage_pb2.DESCRIPTOR.services_by_name["StorageService"].full_name,
                    lambda grpc_server: storage_pb2_grpc.add_StorageServiceServicer_to_server(
                        StorageServicer(storage), grpc_server
                    ),
                )
            ],
            authenticator,
        )
        if relay is not None:
            relay.start()
            stack.push_async_callback(relay.stop)
        await server.start()
        stack.push_async_callback(server.stop)
        yield server


SERVICES: dict[str, Callable[[Settings], contextlib.AbstractAsyncContextManager[GrpcServer]]] = {
    "storage": storage_on_mongo,
}


async def run_service(name: str, settings: Settings) -> None:
    """Serves one service until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    async with SERVICES[name](settings):
        stop_on_signals(stop.set)
        await stop.wait()
