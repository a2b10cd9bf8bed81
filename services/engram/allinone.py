"""`engram dev`: every implemented service in one process on embedded backends.

State lives under one directory (SQLite file, indexes) and survives restarts. Each part
is composed by its own package: storage, quota and authz here (`EmbeddedCore`), then the
indexer (`engram.indexer.embedded`) and search (`engram.search.embedded`) on top of it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engram.authz.dev_identity import load_or_create_secret
from engram.authz.enforcement import FixedPrincipalAuthenticator, PolicyAuthorizer
from engram.authz.service import AuthzService
from engram.authz.servicer import AuthzServicer
from engram.authz.sqlite_audit import SCHEMA as AUDIT_SCHEMA
from engram.authz.sqlite_audit import SqliteAuditLog
from engram.authz.sqlite_tokens import SCHEMA as TOKEN_SCHEMA
from engram.authz.sqlite_tokens import SqliteTokenStore
from engram.authz.tokens import JwtVerifier, TokenAuthenticator
from engram.backends.sqlite import SqliteDatabase
from engram.domain.principals import LOCAL_ADMIN
from engram.events.inprocess import InProcessPublisher
from engram.events.relay import OutboxRelay
from engram.events.sqlite_outbox import SqliteOutbox
from engram.indexer.embedding_cache import SCHEMA as EMBEDDING_CACHE_SCHEMA
from engram.quota.service import QuotaService
from engram.quota.servicer import QuotaServicer
from engram.quota.sqlite_ledger import SCHEMA as LEDGER_SCHEMA
from engram.quota.sqlite_ledger import SqliteUsageLedger
from engram.runtime.composition import document_limits, quota_defaults
from engram.runtime.interceptors import Authenticator
from engram.runtime.rate_limit import SCHEMA as RATE_LIMIT_SCHEMA
from engram.runtime.rate_limit import SqliteRateLimitStore
from engram.runtime.server import GrpcServer, ServiceRegistration
from engram.runtime.settings import Settings
from engram.storage.service import StorageService
from engram.storage.servicer import StorageServicer
from engram.storage.sqlite_repository import SCHEMA as DOCUMENT_SCHEMA
from engram.storage.sqlite_repository import SqliteDocumentRepository
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
)

log = logging.getLogger(__name__)

DATABASE_FILE = "engram.db"


@dataclass
class EmbeddedCore:
    """What every embedded part builds on: the database, storage, quota, authz, events."""

    settings: Settings
    database: SqliteDatabase
    repository: SqliteDocumentRepository
    storage: StorageService
    quota: QuotaService
    authorizer: PolicyAuthorizer
    audit: SqliteAuditLog
    publisher: InProcessPublisher
    relay: OutboxRelay
    # Resolves JWTs (ENGRAM_JWT_SECRET or the data directory's secret) and personal tokens.
    tokens: TokenAuthenticator
    jwt_secret: str
    registrations: list[ServiceRegistration] = field(default_factory=list)


@dataclass
class EmbeddedEngram:
    """The running all-in-one server and the pieces tests may inspect."""

    server: GrpcServer
    core: EmbeddedCore
    # Set by the parts composed on top of the core (indexer, search), for tests.
    parts: dict[str, object] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.server.port

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


def service_name(descriptor_module: object, service: str) -> str:
    return str(descriptor_module.DESCRIPTOR.services_by_name[service].full_name)  # type: ignore[attr-defined]


async def build_core(settings: Settings, stack: contextlib.AsyncExitStack) -> EmbeddedCore:
    """Storage, quota, authz and the event relay on one SQLite file."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = SqliteDatabase(settings.data_dir / DATABASE_FILE)
    await database.open(
        [
            DOCUMENT_SCHEMA,
            LEDGER_SCHEMA,
            AUDIT_SCHEMA,
            TOKEN_SCHEMA,
            EMBEDDING_CACHE_SCHEMA,
            RATE_LIMIT_SCHEMA,  # issue 13
        ]
    )
    stack.push_async_callback(database.close)
    repository = SqliteDocumentRepository(database, retention=settings.version_retention)
    quota = QuotaService(SqliteUsageLedger(database), quota_defaults(settings), repository)
    authorizer = PolicyAuthorizer()
    audit = SqliteAuditLog(database)
    publisher = InProcessPublisher()
    relay = OutboxRelay(SqliteOutbox(database), publisher)
    storage = StorageService(repository, quota, authorizer, audit, relay, document_limits(settings))
    secret = (
        settings.jwt_secret.get_secret_value()
        if settings.jwt_secret
        else load_or_create_secret(settings.data_dir)
    )
    token_store = SqliteTokenStore(database)
    tokens = TokenAuthenticator(
        JwtVerifier(secret=secret, jwks_path=settings.jwks_path),
        token_store,
        cache_seconds=settings.auth_cache_seconds,
    )
    authz = AuthzService(
        tokens,
        token_store,
        audit,
        authorizer,
        allow_act_as=settings.allow_act_as,  # issue 13
    )
    core = EmbeddedCore(
        settings,
        database,
        repository,
        storage,
        quota,
        authorizer,
        audit,
        publisher,
        relay,
        tokens,
        secret,
    )
    core.registrations += [
        ServiceRegistration(
            service_name(storage_pb2, "StorageService"),
            lambda server: storage_pb2_grpc.add_StorageServiceServicer_to_server(
                StorageServicer(storage), server
            ),
        ),
        ServiceRegistration(
            service_name(quota_pb2, "QuotaService"),
            lambda server: quota_pb2_grpc.add_QuotaServiceServicer_to_server(
                QuotaServicer(quota, authorizer), server
            ),
        ),
        ServiceRegistration(
            service_name(authz_pb2, "AuthzService"),
            lambda server: authz_pb2_grpc.add_AuthzServiceServicer_to_server(
                AuthzServicer(authz), server
            ),
        ),
    ]
    return core


@contextlib.asynccontextmanager
async def embedded_engram(
    settings: Settings, *, authenticator: Authenticator | None = None, require_auth: bool = False
) -> AsyncIterator[EmbeddedEngram]:
    """Starts the all-in-one server; stops it and closes every backend on exit.

    Without `require_auth` (and no `authenticator`) every caller is the implicit local admin
    of tenant `local`; with it, callers need a JWT or a personal access token.
    """
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(settings, stack)
        parts: dict[str, object] = {}
        # Parts composed on top of the core add their registrations and lifecycles here;
        # they subscribe to the relay's publisher before the relay starts.
        from engram.indexer.embedded import build_embedded_indexing

        indexing = await build_embedded_indexing(core, stack)
        parts["indexing"] = indexing
        from engram.search.embedded import build_embedded_search

        parts["search"] = build_embedded_search(core, indexing, stack)
        server = GrpcServer(
            settings,
            core.registrations,
            authenticator
            or (core.tokens if require_auth else FixedPrincipalAuthenticator(LOCAL_ADMIN)),
            rate_limit_store=SqliteRateLimitStore(core.database),  # issue 13
        )
        core.relay.start()
        stack.push_async_callback(core.relay.stop)
        await server.start()
        stack.push_async_callback(server.stop)
        yield EmbeddedEngram(server, core, parts)
