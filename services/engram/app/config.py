"""Typed configuration of every component, built once from `Settings` at the edge.

Components take these small frozen configs; nothing below the composition root reads the
global settings. A production process states what it needs as a model of required fields
(`MongoNeeds`, ...); `require` validates them all at once, so a missing setting fails at
start with one message naming every missing variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar, cast

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from engram.authz.tokens import ROLE_NAMES, ClaimMapping, RemoteJwksConfig
from engram.domain.errors import MissingSetting
from engram.domain.fusion import FusionMethod
from engram.domain.prompt import PromptLayout
from engram.domain.quotas import QuotaDefaults
from engram.domain.spaces import Visibility
from engram.events.sqlite_feed import FeedOptions
from engram.indexer.embedders import EmbedderConfig
from engram.indexer.jetstream_consumer import ConsumerOptions
from engram.runtime.channels import ChannelConfig, ClientTls
from engram.runtime.settings import Settings
from engram.search.service import SearchOptions
from engram.storage.service import DocumentLimits
from engram.workspace.service import WorkspacePolicy
from engram.workspace.write_limits import WriteLimits


class Needs(BaseModel):
    """Settings a production process cannot start without; field names are the settings'."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class MongoNeeds(Needs):
    mongo_uri: SecretStr


class NatsNeeds(Needs):
    nats_url: str


class OpenSearchNeeds(Needs):
    opensearch_url: str


class StorageClientNeeds(Needs):
    """The indexer reads documents from StorageService as a service principal, and
    QuotaService reads what the documents hold (Reconcile) the same way."""

    storage_addr: str
    service_token: SecretStr


class IndexerClientNeeds(Needs):
    """Search reads the indexer's progress (read-your-writes waits) through IndexerService
    as a service principal."""

    indexer_addr: str
    service_token: SecretStr


class WorkspaceClientNeeds(Needs):
    """The workspace calls StorageService and SearchService as a service principal."""

    storage_addr: str
    search_addr: str
    service_token: SecretStr


class QuotaClientNeeds(Needs):
    """Storage charges bytes through a remote QuotaService as a service principal."""

    quota_addr: str
    service_token: SecretStr


class MaintenanceClientNeeds(Needs):
    """The maintenance worker acts through StorageService and reconciles through
    QuotaService, as a service principal."""

    storage_addr: str
    quota_addr: str
    service_token: SecretStr


N = TypeVar("N", bound=Needs)

VECTOR_CHOICES = (
    "ENGRAM_QDRANT_URL (or ENGRAM_QDRANT_PATH, or ENGRAM_VECTOR_DIR for the embedded vector "
    "index on one host)"
)


@dataclass(frozen=True, slots=True)
class QdrantServer:
    url: str
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class QdrantLocal:
    path: Path


@dataclass(frozen=True, slots=True)
class EmbeddedVectors:
    directory: Path


VectorChoice = QdrantServer | QdrantLocal | EmbeddedVectors


def vector_choice(settings: Settings) -> VectorChoice | None:
    """Qdrant at ENGRAM_QDRANT_URL, else Qdrant local mode at ENGRAM_QDRANT_PATH, else the
    embedded index at ENGRAM_VECTOR_DIR; None when none is set."""
    if settings.qdrant_url:
        key = settings.qdrant_api_key
        return QdrantServer(settings.qdrant_url, key.get_secret_value() if key else None)
    if settings.qdrant_path is not None:
        return QdrantLocal(settings.qdrant_path)
    if settings.vector_dir is not None:
        return EmbeddedVectors(settings.vector_dir)
    return None


class Required:
    """What `require` found: each needs model, by its class."""

    def __init__(self, found: dict[type[Needs], Needs], vector: VectorChoice | None) -> None:
        self._found = found
        self._vector = vector

    def __getitem__(self, model: type[N]) -> N:
        return cast(N, self._found[model])

    @property
    def vector(self) -> VectorChoice:
        if self._vector is None:
            raise KeyError("the vector index was not required")
        return self._vector


def require(settings: Settings, models: Sequence[type[Needs]], *, vector: bool = False) -> Required:
    """Validates every model against the settings; raises MissingSetting naming every
    missing variable at once."""
    values = settings.model_dump(exclude_none=True)
    found: dict[type[Needs], Needs] = {}
    missing: list[str] = []
    for model in models:
        try:
            found[model] = model.model_validate(values)
        except ValidationError as error:
            for problem in error.errors():
                name = f"ENGRAM_{str(problem['loc'][0]).upper()}"
                if name not in missing:
                    missing.append(name)
    choice = vector_choice(settings) if vector else None
    if vector and choice is None:
        missing.append(VECTOR_CHOICES)
    if missing:
        raise MissingSetting(
            f"missing setting{'s' if len(missing) > 1 else ''}: {', '.join(missing)} "
            "(production services never fall back to embedded backends)"
        )
    return Required(found, choice)


@dataclass(frozen=True, slots=True)
class JwtConfig:
    """How bearer JWTs are checked (`ENGRAM_JWT_*`, `ENGRAM_JWKS_PATH`)."""

    secret: str | None = field(default=None, repr=False)
    jwks_path: Path | None = None
    audience: str | None = None
    issuer: str | None = None
    cache_seconds: float = 30.0
    jwks: RemoteJwksConfig | None = None
    claims: ClaimMapping = field(default_factory=ClaimMapping)


@dataclass(frozen=True, slots=True)
class IndexingConfig:
    chunk_size: int
    chunk_overlap: int
    concurrency: int
    # Consecutive failures of one document before the embedded feed gives up on it.
    max_attempts: int
    drop_grace_seconds: float


@dataclass(frozen=True, slots=True)
class Components:
    """Every component's config, built once per process from the settings."""

    limits: DocumentLimits
    quotas: QuotaDefaults
    version_retention: int
    jwt: JwtConfig
    # Whether token admins may mint tokens for other users (ENGRAM_ALLOW_ACT_AS).
    allow_act_as: bool
    embedder: EmbedderConfig
    # Search's own query embedders: their own thread count, at normal priority.
    query_embedder: EmbedderConfig
    indexing: IndexingConfig
    consumer: ConsumerOptions
    search: SearchOptions
    query_cache_size: int
    workspace_writes: WriteLimits
    workspace_policy: WorkspacePolicy
    # memory_search's min_relevance when a request names none (ENGRAM_WORKSPACE_MIN_RELEVANCE).
    workspace_min_relevance: float
    # ENGRAM_WORKSPACE_TEMPLATES: replaces the packaged seed templates by name.
    workspace_templates: Path | None
    # Channels to the other services (ENGRAM_*_ADDR): TLS and keepalive.
    channels: ChannelConfig
    # The change feed: `engram dev`'s outbox retention, and watches per process.
    feed: FeedOptions
    max_watchers: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Components:
        embedder = _embedder_config(settings)
        return cls(
            limits=DocumentLimits(
                max_doc_bytes=settings.max_doc_bytes,
                max_import_bytes=settings.max_import_bytes,
                max_import_entries=settings.max_import_entries,
                max_import_inflight_bytes=settings.max_import_inflight_bytes,
            ),
            quotas=_quota_defaults(settings),
            version_retention=settings.version_retention,
            feed=FeedOptions(retention=timedelta(hours=settings.feed_retention_hours)),
            max_watchers=settings.feed_max_watchers,
            allow_act_as=settings.allow_act_as,
            jwt=_jwt_config(settings),
            embedder=embedder,
            query_embedder=embedder.for_queries(
                settings.search_embed_threads,
                window_seconds=settings.search_embed_batch_window_ms / 1000,
                max_batch=settings.search_embed_max_batch,
            ),
            indexing=IndexingConfig(
                chunk_size=settings.chunk_size,
                chunk_overlap=settings.chunk_overlap,
                concurrency=settings.indexer_concurrency,
                max_attempts=settings.indexer_max_deliver,
                drop_grace_seconds=settings.indexer_model_drop_grace_seconds,
            ),
            consumer=ConsumerOptions(
                durable=settings.indexer_durable,
                ack_wait_seconds=settings.indexer_ack_wait_seconds,
                max_deliver=settings.indexer_max_deliver,
                retry_base_seconds=settings.indexer_retry_base_seconds,
                retry_max_seconds=settings.indexer_retry_max_seconds,
                outage_wait_seconds=settings.indexer_outage_wait_seconds,
                fetch_batch=settings.indexer_fetch_batch,
                concurrency=settings.indexer_concurrency,
                drain_seconds=settings.shutdown_grace_seconds,
            ),
            search=SearchOptions(
                candidate_depth=settings.search_candidate_depth,
                backend_timeout_seconds=settings.search_backend_timeout_seconds,
                max_wait_seconds=settings.search_max_wait_seconds,
                fusion=FusionMethod(settings.search_fusion),
            ),
            query_cache_size=settings.search_query_cache_size,
            workspace_writes=WriteLimits(
                per_minute=settings.workspace_writes_per_minute,
                per_hour=settings.workspace_writes_per_hour,
            ),
            workspace_policy=WorkspacePolicy(
                memory_append_only=settings.workspace_memory_append_only,
                prompt_layout=PromptLayout(settings.workspace_prompt_layout),
            ),
            workspace_templates=settings.workspace_templates,
            workspace_min_relevance=settings.workspace_min_relevance,
            channels=channel_config(settings),
        )


def _embedder_config(settings: Settings) -> EmbedderConfig:
    return EmbedderConfig(
        provider=settings.embedder_provider,
        max_length=settings.embed_max_length,
        batch_size=settings.embed_batch_size,
        batch_tokens=settings.embed_batch_tokens,
        threads=settings.embed_threads,
        nice=settings.indexing_nice,
        timeout_seconds=settings.embed_timeout_seconds,
        max_retries=settings.embed_max_retries,
        openai_base_url=settings.openai_base_url,
        openai_api_key=(
            settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        ),
        openai_model=settings.openai_model,
        openai_dimension=settings.openai_dimension,
        ollama_url=settings.ollama_url,
        ollama_model=settings.ollama_model,
        ollama_dimension=settings.ollama_dimension,
    )


def _quota_defaults(settings: Settings) -> QuotaDefaults:
    return QuotaDefaults(
        subcaps={
            Visibility.PRIVATE: settings.quota_private,
            Visibility.BOT: settings.quota_bot,
            Visibility.PROJECT: settings.quota_project,
            Visibility.CROSS_PROJECT: settings.quota_cross_project,
            Visibility.USER: settings.quota_user,
            Visibility.ORG: settings.quota_org,
            Visibility.GLOBAL: settings.quota_global,
        },
        tenant_total=settings.quota_tenant_total,
        instance_total=settings.quota_instance_total,
    )


def _jwt_config(settings: Settings) -> JwtConfig:
    return JwtConfig(
        secret=settings.jwt_secret.get_secret_value() if settings.jwt_secret else None,
        jwks_path=settings.jwks_path,
        audience=settings.jwt_audience,
        issuer=settings.jwt_issuer,
        cache_seconds=settings.auth_cache_seconds,
        jwks=(
            RemoteJwksConfig(
                url=settings.jwks_url,
                cache_seconds=settings.jwks_cache_seconds,
                refresh_min_seconds=settings.jwks_refresh_min_seconds,
                timeout_seconds=settings.jwks_timeout_seconds,
            )
            if settings.jwks_url
            else None
        ),
        claims=ClaimMapping(
            subject=settings.jwt_claim_subject,
            tenant=settings.jwt_claim_tenant,
            role=settings.jwt_claim_role,
            platform_admin=settings.jwt_claim_platform_admin,
            role_map={value: ROLE_NAMES[role] for value, role in settings.jwt_role_map.items()},
        ),
    )


def channel_config(settings: Settings) -> ChannelConfig:
    """Channels to other services: TLS when ENGRAM_TLS_INTERNAL or a client TLS file is set."""
    tls: ClientTls | None = None
    if (
        settings.tls_internal
        or settings.tls_ca_file
        or settings.tls_client_cert_file
        or settings.tls_client_key_file
    ):
        try:
            tls = ClientTls(
                ca_file=settings.tls_ca_file,
                cert_file=settings.tls_client_cert_file,
                key_file=settings.tls_client_key_file,
                server_name=settings.tls_server_name,
            )
        except ValueError:
            raise MissingSetting(
                "set both ENGRAM_TLS_CLIENT_CERT_FILE and ENGRAM_TLS_CLIENT_KEY_FILE, or neither"
            ) from None
    return ChannelConfig(
        tls=tls,
        keepalive_seconds=settings.grpc_keepalive_seconds,
        keepalive_timeout_seconds=settings.grpc_keepalive_timeout_seconds,
        max_message_bytes=settings.max_message_bytes,
    )
