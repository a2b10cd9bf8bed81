"""Every adapter choice, made once: SQLite or MongoDB stores, tantivy or OpenSearch, the
embedded vector index or Qdrant, which token authenticator; and the health probe of each
backend a production process needs."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, assert_never

from engram.app.config import (
    Components,
    EmbeddedVectors,
    JwtConfig,
    MongoNeeds,
    QdrantLocal,
    QdrantServer,
    VectorChoice,
)
from engram.authz.mongo_tokens import MongoTokenStore
from engram.authz.remote_tokens import AuthzPersonalTokens
from engram.authz.sqlite_audit import SCHEMA as AUDIT_SCHEMA
from engram.authz.sqlite_tokens import SCHEMA as TOKEN_SCHEMA
from engram.authz.tokens import (
    JwtVerifier,
    PersonalTokens,
    RemoteJwks,
    TokenAuthenticator,
    TokenStore,
)
from engram.backends.mongo import MongoDatabase, connect, mongo_errors
from engram.backends.sqlite import SqliteDatabase
from engram.client.aio import EngramClient
from engram.indexer.embedding_cache import SCHEMA as EMBEDDING_CACHE_SCHEMA
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import VectorIndex
from engram.indexes.progress import SCHEMA as INDEX_PROGRESS_SCHEMA
from engram.indexes.vector.edge_index import EdgeVectorIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.maintenance.dream_watermarks import SCHEMA as DREAM_WATERMARK_SCHEMA
from engram.maintenance.sqlite_stores import SCHEMA as MAINTENANCE_SCHEMA
from engram.quota.sqlite_ledger import SCHEMA as LEDGER_SCHEMA
from engram.runtime.channels import open_channel
from engram.runtime.health import Dependency
from engram.runtime.rate_limit import SCHEMA as RATE_LIMIT_SCHEMA
from engram.runtime.settings import Settings
from engram.runtime.tracing import tracing_client_interceptors
from engram.storage.sqlite_outbox import migrate_outbox
from engram.storage.sqlite_repository import SCHEMA as DOCUMENT_SCHEMA
from engram.workspace.agent_state import SCHEMA as AGENT_STATE_SCHEMA

DATABASE_FILE = "engram.db"
KEYWORD_DIR = "keyword"
VECTOR_DIR = "vectors"
# How often a process sharing ENGRAM_VECTOR_DIR reads the others' writes (the vector leg's
# freshness across processes: about this plus a search).
VECTOR_FOLLOW_SECONDS = 0.2


async def open_sqlite(settings: Settings, stack: contextlib.AsyncExitStack) -> SqliteDatabase:
    """The embedded database under the data directory, with every embedded table."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    database = SqliteDatabase(settings.data_dir / DATABASE_FILE)
    await database.open(
        [
            DOCUMENT_SCHEMA,
            LEDGER_SCHEMA,
            AUDIT_SCHEMA,
            TOKEN_SCHEMA,
            EMBEDDING_CACHE_SCHEMA,
            RATE_LIMIT_SCHEMA,
            AGENT_STATE_SCHEMA,
            MAINTENANCE_SCHEMA,
            DREAM_WATERMARK_SCHEMA,
            INDEX_PROGRESS_SCHEMA,
        ],
        [migrate_outbox],
    )
    stack.push_async_callback(database.close)
    return database


def connect_mongo(
    needs: MongoNeeds, settings: Settings, stack: contextlib.AsyncExitStack
) -> MongoDatabase:
    client, database = connect(needs.mongo_uri.get_secret_value(), settings.mongo_db)
    stack.push_async_callback(client.close)
    return database


def tantivy_index(settings: Settings) -> TantivyKeywordIndex:
    """The embedded keyword index at ENGRAM_TANTIVY_DIR, default `<data dir>/keyword`."""
    return TantivyKeywordIndex(
        settings.tantivy_dir or settings.data_dir / KEYWORD_DIR,
        writer_heap_bytes=settings.tantivy_writer_heap_bytes,
        search_threads=settings.tantivy_search_threads,
        writer_nice=settings.indexing_nice,
    )


def opensearch_index(url: str, settings: Settings) -> OpenSearchKeywordIndex:
    return OpenSearchKeywordIndex(
        url,
        alias=settings.opensearch_index,
        shards=settings.opensearch_shards,
        replicas=settings.opensearch_replicas,
        refresh_interval=settings.opensearch_refresh_interval,
        write_refresh=settings.opensearch_write_refresh,
        timeout_seconds=settings.opensearch_timeout_seconds,
    )


def embedded_vector_index(settings: Settings) -> EdgeVectorIndex:
    """`engram dev`'s vector index under the data directory: Qdrant Edge, in a child process
    the index owns (an earlier exact index found there is migrated when it opens)."""
    return EdgeVectorIndex(settings.data_dir / VECTOR_DIR)


def vector_index(choice: VectorChoice) -> VectorIndex:
    """The vector index the production settings chose (`engram.app.config.vector_choice`)."""
    from engram.indexes.vector.qdrant_index import QdrantVectorIndex

    match choice:
        case EmbeddedVectors(directory):
            # Shared by processes (indexer, search, maintenance): each follows the others'
            # writes. Qdrant Edge cannot be shared: one process owns a shard.
            return NumpyVectorIndex(directory, follow_seconds=VECTOR_FOLLOW_SECONDS)
        case QdrantServer(url, api_key):
            return QdrantVectorIndex.connect(url, api_key=api_key)
        case QdrantLocal(path):
            from qdrant_client import AsyncQdrantClient

            return QdrantVectorIndex(AsyncQdrantClient(path=str(path)))
    assert_never(choice)


def token_authenticator(
    jwt: JwtConfig,
    store: TokenStore | None,
    *,
    secret: str | None = None,
    personal: PersonalTokens | None = None,
) -> TokenAuthenticator:
    """JWTs checked as configured (secret or JWKS, audience, issuer) and personal tokens
    from `store` (or `personal`); `secret` replaces the configured one (`engram dev`'s own
    secret)."""
    verifier = JwtVerifier(
        secret=secret or jwt.secret,
        jwks_path=jwt.jwks_path,
        audience=jwt.audience,
        issuer=jwt.issuer,
        remote=RemoteJwks(jwt.jwks) if jwt.jwks is not None else None,
        claims=jwt.claims,
    )
    return TokenAuthenticator(verifier, store, cache_seconds=jwt.cache_seconds, personal=personal)


def authz_token_authenticator(
    components: Components, authz_addr: str, stack: contextlib.AsyncExitStack
) -> TokenAuthenticator:
    """JWTs checked here; personal tokens resolved by AuthzService at `authz_addr`, which
    owns them (no read of its collection from this process)."""
    channel = open_channel(
        authz_addr, components.channels, interceptors=tracing_client_interceptors()
    )
    stack.push_async_callback(channel.close)
    client = EngramClient(authz_addr, channel=channel)
    personal = AuthzPersonalTokens(client, cache_seconds=components.jwt.cache_seconds)
    return token_authenticator(components.jwt, None, personal=personal)


async def mongo_token_authenticator(
    components: Components, database: MongoDatabase
) -> TokenAuthenticator:
    """Production: JWTs as configured, personal tokens from MongoDB."""
    store = MongoTokenStore(database)
    await store.ensure_indexes()
    return token_authenticator(components.jwt, store)


# --- health probes (background only; see engram.runtime.health) -----------------------------


def mongo_dependency(database: MongoDatabase) -> Dependency:
    async def ping() -> bool:
        with mongo_errors("pinging"):
            await database.command("ping")
        return True

    return Dependency("mongodb", ping)


def nats_dependency(client: Any) -> Dependency:
    async def connected() -> bool:
        return bool(client.is_connected)

    return Dependency("nats", connected)


def opensearch_dependency(index: OpenSearchKeywordIndex) -> Dependency:
    return Dependency("opensearch", index.ping)


def either_index_dependency(
    keyword: OpenSearchKeywordIndex, vector: VectorIndex
) -> Dependency | None:
    """Search answers (degraded) while one index answers: it needs either, not both."""
    vector_ping = getattr(vector, "ping", None)
    if vector_ping is None:
        return None

    async def either() -> bool:
        # The first index to answer decides; a hung one does not hold the other's answer.
        pending = {asyncio.ensure_future(keyword.ping()), asyncio.ensure_future(vector_ping())}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(task.exception() is None and task.result() is True for task in done):
                    return True
            return False
        finally:
            for task in pending:
                task.cancel()

    return Dependency("opensearch-or-qdrant", either)


def vector_dependency(index: VectorIndex) -> Dependency | None:
    """Qdrant's probe; the embedded vector index is local files and needs none."""
    ping = getattr(index, "ping", None)
    return Dependency("qdrant", ping) if ping is not None else None
