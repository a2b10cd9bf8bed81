"""Settings from `ENGRAM_*` environment variables (pydantic-settings)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ByteSize, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from engram.domain.content import DEFAULT_MAX_DOC_BYTES

MIB = 1024 * 1024
GIB = 1024 * MIB


class Settings(BaseSettings):
    """Every knob of every service; each is `ENGRAM_<NAME>` in the environment. Sizes
    (`ByteSize`) read as bytes or with a unit: 500MB, 512MiB, 2GB (10^9), 2GiB (2^30)."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    # --- serving -----------------------------------------------------------------------------
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 50051
    metrics_host: str = "127.0.0.1"
    # 0 disables the Prometheus endpoint.
    metrics_port: int = 9464
    shutdown_grace_seconds: float = 10.0
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    access_log: bool = True
    # Server-wide limits (issue 13): message size both ways, HTTP/2 streams per connection,
    # calls in progress per process (beyond: RESOURCE_EXHAUSTED; 0 = unbounded).
    max_message_bytes: ByteSize = Field(default=ByteSize(16 * MIB), ge=1024)
    # As many as max_concurrent_rpcs: a client's burst on a new connection that reaches the
    # server before its SETTINGS frame does is refused with REFUSED_STREAM (UNAVAILABLE).
    max_concurrent_streams: int = Field(default=1000, ge=1)
    max_concurrent_rpcs: int = Field(default=1000, ge=0)
    # Expensive calls (import, export, reindex, search over more than
    # rate_limit_search_min_spaces spaces) per principal per method per minute, counted in
    # the store so replicas share it; 0 = no limit.
    rate_limit_per_minute: int = Field(default=60, ge=0)
    rate_limit_search_min_spaces: int = Field(default=4, ge=0)
    # Each backend a service needs is probed this often; health follows the answers.
    health_probe_seconds: float = Field(default=2.0, gt=0)
    # A connection is closed (HTTP/2 GOAWAY) after this long, so clients spread over the
    # replicas behind a Service again; calls in flight get the grace to finish, new calls
    # go out on a new connection. 0 = connections live forever.
    grpc_max_connection_age_seconds: float = Field(default=300.0, ge=0)
    grpc_max_connection_age_grace_seconds: float = Field(default=30.0, ge=0)
    # HTTP/2 keepalive pings, by the server and by this process's channels to other
    # services: a peer that does not answer within the timeout is dropped. 0 = no pings.
    grpc_keepalive_seconds: float = Field(default=60.0, ge=0)
    grpc_keepalive_timeout_seconds: float = Field(default=20.0, gt=0)

    # --- TLS (files; the server reloads its own on change) -------------------------------------
    # The server's certificate chain and key: with both set the gRPC port speaks TLS only.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # With this set, clients must present a certificate signed by this CA (mTLS).
    tls_client_ca_file: Path | None = None
    # Channels to other services (ENGRAM_*_ADDR) use TLS when this is true or any of the
    # three below is set; the CA to trust (default: the system's roots), and this
    # process's client certificate and key for servers that require mTLS.
    tls_internal: bool = False
    tls_ca_file: Path | None = None
    tls_client_cert_file: Path | None = None
    tls_client_key_file: Path | None = None
    # The name checked in the other services' certificates, when not their address's host.
    tls_server_name: str | None = None

    # --- embedded mode -----------------------------------------------------------------------
    data_dir: Path = Path(".engram")

    # --- documents ---------------------------------------------------------------------------
    max_doc_bytes: ByteSize = Field(default=ByteSize(DEFAULT_MAX_DOC_BYTES), ge=0)
    version_retention: int = Field(default=50, ge=0)
    max_import_bytes: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    max_import_entries: int = Field(default=10_000, ge=1)
    # Bytes all running imports of one principal may hold at once, per process.
    max_import_inflight_bytes: ByteSize = Field(default=ByteSize(512 * MIB), ge=0)

    # --- quotas (bytes; ARCHITECTURE §2) -----------------------------------------------------
    quota_private: ByteSize = Field(default=ByteSize(64 * MIB), ge=0)
    quota_bot: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    quota_project: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    quota_cross_project: ByteSize = Field(default=ByteSize(512 * MIB), ge=0)
    quota_user: ByteSize = Field(default=ByteSize(128 * MIB), ge=0)
    quota_org: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)
    quota_global: ByteSize = Field(default=ByteSize(0), ge=0)
    quota_tenant_total: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)
    quota_instance_total: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)

    # --- identity ----------------------------------------------------------------------------
    jwt_secret: SecretStr | None = None
    jwks_path: Path | None = None
    # An identity provider's JWKS endpoint: keys cached for jwks_cache_seconds; a token
    # signed by an unknown key id refetches them, at most once per jwks_refresh_min_seconds.
    jwks_url: str | None = None
    jwks_cache_seconds: float = Field(default=300.0, gt=0)
    jwks_refresh_min_seconds: float = Field(default=30.0, ge=0)
    jwks_timeout_seconds: float = Field(default=5.0, gt=0)
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    # Where the principal is in a JWT's claims: dotted paths into nested claims (a claim
    # name that itself holds dots, like "https://example.com/tenant", is matched whole).
    jwt_claim_subject: str = "sub"
    jwt_claim_tenant: str = "tenant"
    # A string or a list of strings; with a list the most powerful known role wins.
    jwt_claim_role: str = "role"
    jwt_claim_platform_admin: str = "platform_admin"
    # The provider's role values to engram's roles (viewer, config_editor, member, admin),
    # JSON: {"engram-admin": "admin"}; values not in the map are taken by name.
    jwt_role_map: dict[str, Literal["viewer", "config_editor", "member", "admin"]] = Field(
        default_factory=dict
    )
    # Token of this process's service principal when it calls other services.
    service_token: SecretStr | None = None
    auth_cache_seconds: float = 30.0
    # Admins may create personal tokens for other users (acting as them), audited.
    allow_act_as: bool = False

    # --- production backends -----------------------------------------------------------------
    mongo_uri: SecretStr | None = None
    mongo_db: str = "engram"
    nats_url: str | None = None
    opensearch_url: str | None = None
    qdrant_url: str | None = None
    qdrant_api_key: SecretStr | None = None
    # Qdrant local mode (a directory; one process only, brute-force scans: tests and tiny
    # single-host setups). ENGRAM_QDRANT_URL wins when both are set.
    qdrant_path: Path | None = None
    # The embedded vector index (NumpyVectorIndex) for a single-host `engram serve indexer`:
    # several indexer processes may share it (SQLite); readers see others' writes on reopen.
    vector_dir: Path | None = None

    # --- embeddings (ARCHITECTURE §4) --------------------------------------------------------
    # "local" runs all-MiniLM-L6-v2 int8 in-process; the others call an HTTP provider.
    embedder_provider: Literal["local", "openai", "ollama"] = "local"
    # Token limit per text for the local model (longer texts are truncated).
    embed_max_length: int = Field(default=256, ge=8, le=512)
    embed_batch_size: int = Field(default=32, ge=1, le=2048)
    # onnxruntime intra-op threads of the local model.
    embed_threads: int = Field(default=2, ge=1)
    # Indexing work (the indexer's local model, the tantivy writer) runs this much nicer
    # than the process (Linux, per thread): it takes the CPU that requests leave. 0 = same
    # priority. Search's query embedder always runs at the process's priority.
    indexing_nice: int = Field(default=19, ge=0, le=19)
    embed_timeout_seconds: float = Field(default=30.0, gt=0)
    embed_max_retries: int = Field(default=4, ge=0)
    # POST {openai_base_url}/v1/embeddings; any OpenAI-compatible server.
    openai_base_url: str = "https://api.openai.com"
    openai_api_key: SecretStr | None = None
    openai_model: str = "text-embedding-3-small"
    # None = discovered from the first response.
    openai_dimension: int | None = Field(default=None, ge=1)
    ollama_url: str = "http://127.0.0.1:11434"
    ollama_model: str = "nomic-embed-text"
    ollama_dimension: int | None = Field(default=None, ge=1)

    # --- chunking and the keyword index (ARCHITECTURE §4) ------------------------------------
    chunk_size: int = Field(default=500, ge=50)
    chunk_overlap: int = Field(default=50, ge=0)
    # Alias (and index-name prefix) of the OpenSearch chunk index.
    opensearch_index: str = "engram-chunks"
    opensearch_shards: int = Field(default=1, ge=1)
    opensearch_replicas: int = Field(default=1, ge=0)
    # Periodic refresh of the chunk index; writes refresh on their own (see below).
    opensearch_refresh_interval: str = "1s"
    # "true" refreshes on every write (measured ~15 ms to visible); "wait_for" waits for the
    # periodic refresh (~200 ms with a 200ms interval).
    opensearch_write_refresh: Literal["true", "wait_for"] = "true"
    opensearch_timeout_seconds: float = Field(default=10.0, gt=0)
    # Embedded keyword index: `<data_dir>/keyword` unless set.
    tantivy_dir: Path | None = None
    tantivy_writer_heap_bytes: ByteSize = Field(default=ByteSize(50_000_000), ge=15_000_000)
    tantivy_search_threads: int = Field(default=2, ge=1)

    # --- search (ARCHITECTURE §4) ------------------------------------------------------------
    # Candidates each index returns for fusion (at least the request's limit is fetched).
    search_candidate_depth: int = Field(default=50, ge=1, le=1000)
    # Deadline of each backend leg (query embedding + vector search; BM25 search); one that
    # fails or overruns degrades the answer to the other.
    search_backend_timeout_seconds: float = Field(default=1.0, gt=0)
    # Query embeddings kept in memory, per process (0 = no cache).
    search_query_cache_size: int = Field(default=1024, ge=0)
    # onnxruntime threads of search's own local query embedder (queries are short: one
    # thread is as fast at the median and leaves a core to the BM25 leg).
    search_embed_threads: int = Field(default=1, ge=1)

    # --- indexer worker (ARCHITECTURE §4) ------------------------------------------------------
    # The durable JetStream pull consumer every indexer replica shares.
    indexer_durable: str = "indexer"
    # Unacknowledged for this long (a crashed or stuck worker), an event is redelivered;
    # a live worker extends it while indexing a large document.
    indexer_ack_wait_seconds: float = Field(default=30.0, gt=0)
    # Attempts per event before it goes to the dead-letter subject (engram.deadletter.docs).
    indexer_max_deliver: int = Field(default=8, ge=1)
    # Retry delay after a failed attempt: base * 2^(attempt-1), capped, with jitter.
    indexer_retry_base_seconds: float = Field(default=0.5, gt=0)
    indexer_retry_max_seconds: float = Field(default=30.0, gt=0)
    # Events pulled per fetch, and documents indexed at once, per process.
    indexer_fetch_batch: int = Field(default=64, ge=1, le=1024)
    indexer_concurrency: int = Field(default=8, ge=1, le=256)
    # After a model switch, the old collection is dropped this long after the alias moved,
    # so searches that read the old alias just before can still finish.
    indexer_model_drop_grace_seconds: float = Field(default=30.0, ge=0)

    # --- workspace (ARCHITECTURE §5) ----------------------------------------------------------
    # Workspace writes per agent (principal + space), counted in the store so replicas share
    # them; 0 = no limit.
    workspace_writes_per_minute: int = Field(default=20, ge=0)
    workspace_writes_per_hour: int = Field(default=200, ge=0)
    # A directory of templates (AGENTS.md, SOUL.md, ...) replacing the packaged ones by name.
    workspace_templates: Path | None = None

    # --- other services (distributed mode) ---------------------------------------------------
    storage_addr: str | None = None
    quota_addr: str | None = None
    authz_addr: str | None = None
    search_addr: str | None = None
    indexer_addr: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Init arguments, then the environment, then `ENGRAM_<NAME>_FILE` for every secret,
        then the files of ENGRAM_SECRETS_DIR (a mounted Kubernetes Secret)."""
        return (
            init_settings,
            env_settings,
            SecretFilesSource(settings_cls),
            secrets_dir_source(settings_cls),
        )

    @model_validator(mode="after")
    def _chunk_overlap_below_size(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"ENGRAM_CHUNK_OVERLAP ({self.chunk_overlap}) must be smaller than "
                f"ENGRAM_CHUNK_SIZE ({self.chunk_size})"
            )
        return self


class SettingsFileError(ValueError):
    """A setting's file cannot be used; the message names the variable and the path."""


def _is_secret(field: FieldInfo) -> bool:
    annotation = field.annotation
    return annotation is SecretStr or SecretStr in getattr(annotation, "__args__", ())


class SecretFilesSource(PydanticBaseSettingsSource):
    """`ENGRAM_<NAME>_FILE=/path` for each secret setting: the file's text, without its
    trailing newline, is the value. Setting both the variable and its `_FILE` is an error."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        variable = f"ENGRAM_{field_name.upper()}"
        path = os.environ.get(f"{variable}_FILE")
        if not _is_secret(field) or not path:
            return None, field_name, False
        if os.environ.get(variable):
            raise SettingsFileError(f"set {variable} or {variable}_FILE, not both")
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise SettingsFileError(f"{variable}_FILE: cannot read {path}: {reason}") from None
        return text.rstrip("\r\n"), field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, name)
            if value is not None:
                values[key] = value
        return values


def secrets_dir_source(settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
    """Files named like the variables (ENGRAM_MONGO_URI, case-insensitive) in
    ENGRAM_SECRETS_DIR; a directory that does not exist is an error, not a warning."""
    directory = os.environ.get("ENGRAM_SECRETS_DIR") or None
    if directory is not None and not Path(directory).is_dir():
        raise SettingsFileError(f"ENGRAM_SECRETS_DIR: {directory} is not a directory")
    return SecretsSettingsSource(settings_cls, secrets_dir=directory)
