"""`engram dev`: every implemented service in one process on embedded backends.

State lives under one directory (SQLite file, indexes); it survives restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engram.authz.enforcement import FixedPrincipalAuthenticator, PolicyAuthorizer
from engram.authz.sqlite_audit import SCHEMA as AUDIT_SCHEMA
from engram.authz.sqlite_audit import SqliteAuditLog
from engram.backends.sqlite import SqliteDatabase
from engram.domain.principals import LOCAL_ADMIN
from engram.events.inprocess import InProcessPublisher
from engram.events.relay import OutboxRelay
from engram.events.sqlite_outbox import SqliteOutbox
from engram.quota.service import QuotaService
from engram.quota.sqlite_ledger import SCHEMA as LEDGER_SCHEMA
from engram.quota.sqlite_ledger import SqliteUsageLedger
from engram.runtime.composition import document_limits, quota_defaults
from engram.runtime.interceptors import Authenticator
from engram.runtime.server import GrpcServer, ServiceRegistration, stop_on_signals
from engram.runtime.settings import Settings
from engram.storage.service import StorageService
from engram.storage.servicer import StorageServicer
from engram.storage.sqlite_repository import SCHEMA as DOCUMENT_SCHEMA
from engram.storage.sqlite_repository import SqliteDocumentRepository
from engram.v1 import storage_pb2, storage_pb2_grpc

log = logging.getLogger(__name__)

DATABASE_FILE = "engram.db"


@dataclass
class EmbeddedEngram:
    """The running all-in-one server and the pieces tests may inspect."""

    server: GrpcServer
    database: SqliteDatabase
    storage: StorageService
    quota: QuotaService
    relay: OutboxRelay
    publisher: InProcessPublisher

    @property
    def port(self) -> int:
        return self.server.port


@contextlib.asynccontextmanager
async def embedded_engram(
    settings: Settings, *, authenticator: Authenticator | None = None
) -> AsyncIterator[EmbeddedEngram]:
    """Starts the all-in-one server; stops it and closes every backend on exit."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = SqliteDatabase(settings.data_dir / DATABASE_FILE)
    await database.open([DOCUMENT_SCHEMA, LEDGER_SCHEMA, AUDIT_SCHEMA])
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(database.close)
        repository = SqliteDocumentRepository(database, retention=settings.version_retention)
        quota = QuotaService(SqliteUsageLedger(database), quota_defaults(settings), repository)
        publisher = InProcessPublisher()
        relay = OutboxRelay(SqliteOutbox(database), publisher)
        storage = StorageService(
            repository,
            quota,
            PolicyAuthorizer(),
            SqliteAuditLog(database),
            relay,
            document_limits(settings),
        )
        registrations = [
            ServiceRegistration(
                storage_pb2.DESCRIPTOR.services_by_name["StorageService"].full_name,
                lambda server: storage_pb2_grpc.add_StorageServiceServicer_to_server(
                    StorageServicer(storage), server
                ),
            ),
        ]
        server = GrpcServer(
            settings, registrations, authenticator or FixedPrincipalAuthenticator(LOCAL_ADMIN)
        )
        relay.start()
        stack.push_async_callback(relay.stop)
        await server.start()
        stack.push_async_callback(server.stop)
        yield EmbeddedEngram(server, database, storage, quota, relay, publisher)


async def run_dev(settings: Settings) -> None:
    """Serves until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    async with embedded_engram(settings) as engram:
        stop_on_signals(stop.set)
        log.info(
            "engram dev ready",
            extra={
                "addr": f"{settings.grpc_host}:{engram.port}",
                "data_dir": str(settings.data_dir.resolve()),
            },
        )
        await stop.wait()
