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
    (`ByteSize`) read as bytes or with a unit: 500MB, 512MiB, 2GB (10^9), 2GiB (2^30).

    Each field's docstring is its description in the README's settings reference
    (deploy/settings_reference.py renders it; a test fails when one is missing)."""

    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", extra="ignore", use_attribute_docstrings=True
    )

    # --- serving -----------------------------------------------------------------------------
    grpc_host: str = "127.0.0.1"
    """Address the gRPC server binds (0.0.0.0 in a container)."""
    grpc_port: int = 50051
    """gRPC port (`engram serve --port` wins)."""
    metrics_host: str = "127.0.0.1"
    """Address of the HTTP side port (/metrics, /healthz, /readyz)."""
    metrics_port: int = 9464
    """Port of /metrics, /healthz and /readyz; 0 disables it."""
    shutdown_grace_seconds: float = 10.0
    """On SIGTERM, calls in flight get this long to finish (and pulled events to be acked)."""
    log_level: str = "INFO"
    """Log level (DEBUG, INFO, WARNING, ERROR)."""
    log_format: Literal["json", "text"] = "json"
    """One JSON object per line (with request and trace ids), or text for a terminal
    (`engram dev`'s default when this is not set)."""
    access_log: bool = True
    """Log one line per call (method, code, duration, principal); `engram dev` does not
    unless this is set."""
    max_message_bytes: ByteSize = Field(default=ByteSize(16 * MIB), ge=1024)
    """Largest gRPC message, both ways."""
    max_concurrent_streams: int = Field(default=1000, ge=1)
    """HTTP/2 streams per connection. As many as max_concurrent_rpcs: a burst on a new
    connection that arrives before the server's SETTINGS frame is refused with UNAVAILABLE."""
    max_concurrent_rpcs: int = Field(default=1000, ge=0)
    """Calls in progress per process; beyond, RESOURCE_EXHAUSTED (0 = unbounded)."""
    rate_limit_per_minute: int = Field(default=60, ge=0)
    """Expensive calls (import, export, reindex, search over more than
    rate_limit_search_min_spaces spaces) per principal per method per minute, counted in the
    store so replicas share it; 0 = no limit."""
    rate_limit_search_min_spaces: int = Field(default=4, ge=0)
    """A search over more spaces than this counts as an expensive call."""
    health_probe_seconds: float = Field(default=2.0, gt=0)
    """How often each backend a service needs is probed; gRPC health follows the answers."""
    grpc_max_connection_age_seconds: float = Field(default=300.0, ge=0)
    """A connection is closed (HTTP/2 GOAWAY) after this long, so clients spread over the
    replicas behind a Service again; new calls go out on a new connection. 0 = forever."""
    grpc_max_connection_age_grace_seconds: float = Field(default=30.0, ge=0)
    """Calls in flight on an aged connection get this long to finish."""
    grpc_keepalive_seconds: float = Field(default=60.0, ge=0)
    """HTTP/2 keepalive pings, by the server and by this process's channels to other
    services. 0 = no pings."""
    grpc_keepalive_timeout_seconds: float = Field(default=20.0, gt=0)
    """A peer that does not answer a keepalive ping within this is dropped."""

    # --- TLS (files; the server reloads its own on change) -------------------------------------
    tls_cert_file: Path | None = None
    """The server's certificate chain (PEM); with tls_key_file the gRPC port speaks TLS only."""
    tls_key_file: Path | None = None
    """The server's private key (PEM)."""
    tls_client_ca_file: Path | None = None
    """With this set, clients must present a certificate signed by this CA (mTLS)."""
    tls_internal: bool = False
    """Channels to other services (ENGRAM_*_ADDR) use TLS; implied by any of the three
    settings below."""
    tls_ca_file: Path | None = None
    """CA the channels to other services trust (default: the system's roots)."""
    tls_client_cert_file: Path | None = None
    """This process's client certificate, for servers that require mTLS."""
    tls_client_key_file: Path | None = None
    """The key of tls_client_cert_file."""
    tls_server_name: str | None = None
    """The name checked in the other services' certificates, when not their address's host."""

    # --- embedded mode -----------------------------------------------------------------------
    data_dir: Path = Path(".engram")
    """State directory of `engram dev` (the embedded backends)."""

    # --- documents ---------------------------------------------------------------------------
    max_doc_bytes: ByteSize = Field(default=ByteSize(DEFAULT_MAX_DOC_BYTES), ge=0)
    """Largest document."""
    version_retention: int = Field(default=50, ge=0)
    """Previous versions kept per document."""
    max_import_bytes: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    """Largest ImportSpace archive."""
    max_import_entries: int = Field(default=10_000, ge=1)
    """Most files in one ImportSpace archive."""
    max_import_inflight_bytes: ByteSize = Field(default=ByteSize(512 * MIB), ge=0)
    """Bytes all running imports of one principal may hold at once, per process."""

    # --- change feed (WatchSpace) -------------------------------------------------------------
    feed_retention_hours: int = Field(default=168, ge=1)
    """How long `engram dev` keeps published events for WatchSpace (JetStream's max_age in
    production is the same 7 days); a cursor older than that has expired."""
    feed_max_watchers: int = Field(default=256, ge=1)
    """Most WatchSpace streams one storage process serves at once; more get RESOURCE_EXHAUSTED."""

    # --- quotas (bytes; ARCHITECTURE §2) -----------------------------------------------------
    quota_private: ByteSize = Field(default=ByteSize(64 * MIB), ge=0)
    """Quota of each private space."""
    quota_bot: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    """Quota of each bot space."""
    quota_project: ByteSize = Field(default=ByteSize(256 * MIB), ge=0)
    """Quota of each project space."""
    quota_cross_project: ByteSize = Field(default=ByteSize(512 * MIB), ge=0)
    """Quota of each cross-project space."""
    quota_user: ByteSize = Field(default=ByteSize(128 * MIB), ge=0)
    """Quota of each user space."""
    quota_org: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)
    """Quota of each org space."""
    quota_global: ByteSize = Field(default=ByteSize(0), ge=0)
    """Quota of each global space (0 = only the instance total applies)."""
    quota_tenant_total: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)
    """Default aggregate of a tenant (SetTenantQuota overrides it per tenant)."""
    quota_instance_total: ByteSize = Field(default=ByteSize(1 * GIB), ge=0)
    """Aggregate of all global spaces."""

    # --- identity ----------------------------------------------------------------------------
    jwt_secret: SecretStr | None = None
    """HS256 secret of bearer JWTs."""
    jwks_path: Path | None = None
    """A JWKS file with the public keys of bearer JWTs (RS256/ES256)."""
    jwks_url: str | None = None
    """An identity provider's JWKS endpoint: keys cached for jwks_cache_seconds; a token
    signed by an unknown key id refetches them, at most once per jwks_refresh_min_seconds."""
    jwks_cache_seconds: float = Field(default=300.0, gt=0)
    """How long keys fetched from jwks_url are used."""
    jwks_refresh_min_seconds: float = Field(default=30.0, ge=0)
    """Least time between two fetches of jwks_url."""
    jwks_timeout_seconds: float = Field(default=5.0, gt=0)
    """Deadline of one fetch of jwks_url."""
    jwt_audience: str | None = None
    """Required `aud` of bearer JWTs (unset = not checked)."""
    jwt_issuer: str | None = None
    """Required `iss` of bearer JWTs (unset = not checked)."""
    jwt_claim_subject: str = "sub"
    """Where the principal's name is in a JWT's claims: a dotted path into nested claims (a
    claim name that itself holds dots, like "https://example.com/tenant", is matched whole)."""
    jwt_claim_tenant: str = "tenant"
    """Where the tenant is in a JWT's claims (a dotted path, as jwt_claim_subject)."""
    jwt_claim_role: str = "role"
    """Where the role is: a string or a list of strings (with a list the most powerful known
    role wins)."""
    jwt_claim_platform_admin: str = "platform_admin"
    """Where the platform-admin flag (true) is in a JWT's claims."""
    jwt_role_map: dict[str, Literal["viewer", "config_editor", "member", "admin"]] = Field(
        default_factory=dict
    )
    """The provider's role values to engram's roles, JSON: {"engram-admin": "admin"}; values
    not in the map are taken by name."""
    service_token: SecretStr | None = None
    """Token of this process's service principal when it calls other services."""
    auth_cache_seconds: float = 30.0
    """How long an authenticated token is cached per process (a revoked personal access
    token may still pass for this long)."""
    allow_act_as: bool = False
    """Admins may create personal tokens for other users (acting as them), audited."""

    # --- production backends -----------------------------------------------------------------
    mongo_uri: SecretStr | None = None
    """MongoDB URI: documents, usage, tokens, audit, outbox."""
    mongo_db: str = "engram"
    """MongoDB database."""
    nats_url: str | None = None
    """NATS server with JetStream: document events from storage to the indexer."""
    opensearch_url: str | None = None
    """OpenSearch: the BM25 chunk index."""
    qdrant_url: str | None = None
    """Qdrant server: the vector chunk index."""
    qdrant_api_key: SecretStr | None = None
    """Qdrant API key."""
    qdrant_path: Path | None = None
    """Qdrant local mode (a directory; one process only, brute-force scans: tests and tiny
    single-host setups). ENGRAM_QDRANT_URL wins when both are set."""
    vector_dir: Path | None = None
    """The embedded vector index shared by indexer, search and maintenance processes on one
    host (exact search; each process follows the others' writes within ~0.2 s, and a search
    that cannot answers degraded). `engram dev` uses Qdrant Edge instead (one process)."""

    # --- embeddings (ARCHITECTURE §4) --------------------------------------------------------
    embedder_provider: Literal["local", "openai", "ollama"] = "local"
    """"local" runs all-MiniLM-L6-v2 int8 in-process; the others call an HTTP provider."""
    embed_max_length: int = Field(default=256, ge=8, le=512)
    """Token limit per text for the local model (longer texts are truncated)."""
    embed_batch_size: int = Field(default=32, ge=1, le=2048)
    """Texts embedded per batch (per model run of the local model, which also keeps each
    run within ENGRAM_EMBED_BATCH_TOKENS)."""
    embed_batch_tokens: int = Field(default=512, ge=16, le=65536)
    """Padded tokens per model run of the local model: texts sorted by length go to the
    model in runs of at most this many (rows x longest), at least one text each; small runs
    keep the activations in the CPU's caches (~4 chunks of ~90 tokens, or 32 queries)."""
    embed_threads: int = Field(default=2, ge=1)
    """Worker threads of the indexer's local model: this many model jobs run side by side,
    each on one core (one thread per job costs less CPU per text than two)."""
    indexing_nice: int = Field(default=19, ge=0, le=19)
    """Indexing work (the indexer's local model, the tantivy writer) runs this much nicer
    than the process (Linux, per thread), taking the CPU that requests leave; 0 = same
    priority. Search's query embedder always runs at the process's priority."""
    embed_timeout_seconds: float = Field(default=30.0, gt=0)
    """Deadline of one call to an HTTP embedding provider."""
    embed_max_retries: int = Field(default=4, ge=0)
    """Retries of a failed call to an HTTP embedding provider."""
    openai_base_url: str = "https://api.openai.com"
    """POST {openai_base_url}/v1/embeddings; any OpenAI-compatible server."""
    openai_api_key: SecretStr | None = None
    """API key of the OpenAI-compatible provider."""
    openai_model: str = "text-embedding-3-small"
    """Embedding model of the OpenAI-compatible provider."""
    openai_dimension: int | None = Field(default=None, ge=1)
    """Its vector dimension (unset = discovered from the first response)."""
    ollama_url: str = "http://127.0.0.1:11434"
    """Ollama server."""
    ollama_model: str = "nomic-embed-text"
    """Ollama embedding model."""
    ollama_dimension: int | None = Field(default=None, ge=1)
    """Its vector dimension (unset = discovered from the first response)."""

    # --- chunking and the keyword index (ARCHITECTURE §4) ------------------------------------
    chunk_size: int = Field(default=500, ge=50)
    """Characters per chunk."""
    chunk_overlap: int = Field(default=50, ge=0)
    """Characters two neighbouring chunks share (below chunk_size)."""
    opensearch_index: str = "engram-chunks"
    """Alias (and index-name prefix) of the OpenSearch chunk index."""
    opensearch_shards: int = Field(default=1, ge=1)
    """Primary shards of a new chunk index."""
    opensearch_replicas: int = Field(default=1, ge=0)
    """Replicas of each shard of the chunk index."""
    opensearch_refresh_interval: str = "1s"
    """Periodic refresh of the chunk index; writes refresh on their own (see below)."""
    opensearch_write_refresh: Literal["true", "wait_for"] = "true"
    """"true" refreshes on every write (measured ~15 ms to visible); "wait_for" waits for
    the periodic refresh (~200 ms with a 200ms interval)."""
    opensearch_timeout_seconds: float = Field(default=10.0, gt=0)
    """Deadline of one OpenSearch request."""
    tantivy_dir: Path | None = None
    """Embedded keyword index (unset = `<data_dir>/keyword`)."""
    tantivy_writer_heap_bytes: ByteSize = Field(default=ByteSize(50_000_000), ge=15_000_000)
    """Memory of the embedded keyword index's writer."""
    tantivy_search_threads: int = Field(default=2, ge=1)
    """Threads searching the embedded keyword index."""

    # --- search (ARCHITECTURE §4) ------------------------------------------------------------
    search_candidate_depth: int = Field(default=50, ge=1, le=1000)
    """Candidates each index returns for fusion (at least the request's limit is fetched)."""
    search_fusion: Literal["convex", "rrf"] = "convex"
    """Hybrid fusion when a request names none: a convex combination of normalised scores,
    or weighted reciprocal rank fusion (bench/RESULTS.md, issue 32, compares them)."""
    search_backend_timeout_seconds: float = Field(default=1.0, gt=0)
    """Deadline of each backend leg (query embedding + vector search; BM25 search); one
    that fails or overruns degrades the answer to the other."""
    search_max_wait_seconds: float = Field(default=10.0, gt=0, le=300)
    """The longest a search carrying min_positions (read-your-writes) waits for the indexes
    to reach them; a request's own deadline and max_wait_ms can only shorten it. When it
    runs out the search answers anyway, degraded, naming the index that is behind."""
    search_query_cache_size: int = Field(default=1024, ge=0)
    """Query embeddings kept in memory, per process (0 = no cache)."""
    search_embed_threads: int = Field(default=1, ge=1)
    """Worker threads of search's own local query embedder, one core each (queries are
    short: one thread is as fast at the median and leaves a core to the BM25 leg)."""
    search_embed_batch_window_ms: float = Field(default=2.0, ge=0, le=100)
    """Micro-batching of search's query embedder (the local model's jobs, an HTTP
    provider's POSTs): queries arriving within this many milliseconds of the first waiting
    one share one job (0 = only those arriving while every job slot is busy). Waited only
    while queries arrive together (the last job carried several), so a lone query at low
    load does not pay it."""
    search_workers: int = Field(default=1, ge=1, le=64)
    """Processes `engram serve search` runs, sharing the gRPC port (SO_REUSEPORT), each with
    its own event loop and query batching: one per core the search pod may use
    (`--workers` sets it too). Metrics of every worker are served together on the metrics
    port."""
    search_embed_max_batch: int = Field(default=32, ge=1, le=256)
    """Queries per job of search's query embedder (an HTTP provider's POST also carries at
    most ENGRAM_EMBED_BATCH_SIZE; 1 = no batching); 32 jobs' worth may wait, beyond that a
    query fails at once with UNAVAILABLE (INDEX_UNAVAILABLE)."""

    # --- indexer worker (ARCHITECTURE §4) ------------------------------------------------------
    indexer_durable: str = "indexer"
    """The durable JetStream pull consumer every indexer replica shares."""
    indexer_ack_wait_seconds: float = Field(default=30.0, gt=0)
    """Unacknowledged for this long (a crashed or stuck worker), an event is redelivered; a
    live worker extends it while indexing a large document."""
    indexer_max_deliver: int = Field(default=8, ge=1)
    """Attempts per event before it goes to the dead-letter subject (engram.deadletter.docs)."""
    indexer_retry_base_seconds: float = Field(default=0.5, gt=0)
    """Retry delay after a failed attempt: base * 2^(attempt-1), capped, with jitter."""
    indexer_retry_max_seconds: float = Field(default=30.0, gt=0)
    """Cap of the retry delay."""
    indexer_outage_wait_seconds: float = Field(default=900.0, ge=0)
    """How long an indexing run waits in place (retrying, events kept alive) while a backend
    it needs (OpenSearch, Qdrant, storage) is unavailable, before the failure counts as one
    of the event's attempts. An outage shorter than this dead-letters nothing."""
    indexer_fetch_batch: int = Field(default=64, ge=1, le=1024)
    """Events pulled per fetch, per process."""
    indexer_concurrency: int = Field(default=8, ge=1, le=256)
    """Documents indexed at once, per process."""
    indexer_model_drop_grace_seconds: float = Field(default=30.0, ge=0)
    """After a model switch, the old collection is dropped this long after the alias
    moved, so searches that read the old alias just before can still finish."""

    # --- workspace (ARCHITECTURE §5) ----------------------------------------------------------
    workspace_writes_per_minute: int = Field(default=20, ge=0)
    """Workspace writes per agent (principal + space) per minute, counted in the store so
    replicas share them; 0 = no limit."""
    workspace_writes_per_hour: int = Field(default=200, ge=0)
    """Workspace writes per agent per hour; 0 = no limit."""
    workspace_memory_append_only: bool = True
    """The workspace tools only append to MEMORY.md (seed 004: the operator and dreaming
    change it, the agent rewrites only HEARTBEAT.md); false lets an agent replace it."""
    workspace_prompt_layout: Literal["000", "004"] = "000"
    """The assembled prompt's order when a request names none: "000" (AGENTS, SOUL, USER,
    IDENTITY, MEMORY, logs) or "004" (SOUL, AGENTS, IDENTITY, then USER, MEMORY, HEARTBEAT,
    logs)."""
    workspace_min_relevance: float = Field(default=0.025, ge=0, le=1)
    """memory_search's default min_relevance (a request's own value wins): unless one hit is
    at least this likely relevant the answer is empty, so a question about something never
    stored returns nothing (0 = always answer)."""
    workspace_templates: Path | None = None
    """A directory of templates (AGENTS.md, SOUL.md, ...) replacing the packaged ones by
    name."""

    # --- maintenance worker (issue 15) --------------------------------------------------------
    maintenance_schedule: bool = True
    """Run scheduled maintenance jobs (in `engram dev` and `engram serve maintenance`);
    off = RunJob only."""
    maintenance_tick_seconds: float = Field(default=60.0, gt=0)
    """How often the worker walks every space for jobs that are due (the first walk comes
    one tick after start)."""
    maintenance_lease_seconds: float = Field(default=120.0, ge=3)
    """A run's lease on its job and space; renewed every third of it while the run lasts,
    so a crashed worker's runs are taken over this long after it stopped."""
    maintenance_run_timeout_seconds: float = Field(default=3600.0, gt=0)
    """A run that lasts longer is stopped and recorded as failed."""
    maintenance_retry_after_failure_seconds: float = Field(default=900.0, ge=0)
    """After a failed run the schedule waits this long (or the job's interval, when
    shorter) before running the job on that space again."""
    maintenance_run_retention_days: int = Field(default=30, ge=1)
    """Job runs are listed for this long, then deleted."""
    maintenance_max_on_demand: int = Field(default=4, ge=1)
    """RunJob runs one worker makes at once; beyond, RESOURCE_EXHAUSTED. A run goes on when
    its caller goes away (its record says how it ended)."""

    # --- dreaming (maintenance worker) -------------------------------------------------------
    dream_enabled: bool = False
    """Runs the "dream" job on the spaces that opted in (SetSpaceMaintenance / `engram jobs
    settings --dream`): the new parts of their daily logs are consolidated into MEMORY.md by
    the chat model below. Needs ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL."""
    dream_interval_hours: float = Field(default=24.0, gt=0)
    """Hours between two dream runs on one space."""
    dream_max_input_chars: int = Field(default=48_000, ge=1000)
    """Characters of daily logs sent to the model per run; the rest waits for the next run."""
    llm_base_url: str | None = None
    """Chat model server for dreaming, OpenAI-compatible: POST {llm_base_url}/v1/chat/completions
    (OpenAI, Ollama, vLLM, llama.cpp's server); a URL ending in /v1 is used as it is."""
    llm_model: str | None = None
    """Chat model name on that server (e.g. gpt-4o-mini, llama3.1:8b)."""
    llm_api_key: SecretStr | None = None
    """API key of the chat model server (unset for servers that need none)."""
    llm_timeout_seconds: float = Field(default=120.0, gt=0)
    """Deadline of one chat model call (each of its retries)."""
    llm_max_tokens: int = Field(default=1024, ge=16)
    """Longest answer the chat model may give; an answer cut there is not written."""

    # --- hygiene jobs (maintenance worker) ----------------------------------------------------
    hygiene_interval_hours: float = Field(default=24.0, gt=0)
    """How often the maintenance worker runs each hygiene job (log retention, version
    pruning, embedding backfill, usage reconcile, staleness and duplicate reports) on a
    space, counted from the job's last success there."""
    backfill_max_indexing_lag_seconds: float = Field(default=900.0, ge=0)
    """Embedding backfill leaves alone a document written after the oldest change event the
    indexer has not finished (it is late, not missing), unless that event is older than this:
    then the indexer is taken as stopped or stuck, and backfill re-queues those too."""

    # --- other services (distributed mode) ---------------------------------------------------
    storage_addr: str | None = None
    """host:port of StorageService."""
    quota_addr: str | None = None
    """host:port of QuotaService; with it storage charges bytes there instead of
    in-process."""
    authz_addr: str | None = None
    """host:port of AuthzService; with it a service resolves personal access tokens there
    (cached for auth_cache_seconds) instead of reading them from its own MongoDB."""
    search_addr: str | None = None
    """host:port of SearchService."""
    indexer_addr: str | None = None
    """host:port of IndexerService; with it search reads the index progress its
    read-your-writes waits need there (as ENGRAM_SERVICE_TOKEN's service principal) instead
    of from the indexer's MongoDB collection."""

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
    def _dreaming_has_a_model(self) -> Settings:
        if self.dream_enabled and not (self.llm_base_url and self.llm_model):
            raise ValueError(
                "ENGRAM_DREAM_ENABLED needs ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL "
                "(an OpenAI-compatible chat model server)"
            )
        return self

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
