"""Embedders: the bundled local model and the HTTP providers, built by one factory.

`configured_embedder` builds the provider the configuration names; `embedder_for_model`
rebuilds the embedder of a model id found in the vector index (a model switch, search's
query embedders). Both go through `_build`, so each provider is constructed in one place.
Nothing here connects or loads a model: the local model loads on first use (or `warm_up`),
the HTTP clients connect on first request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from engram.domain.chunks import ModelInfo
from engram.indexes.ports import Embedder

if TYPE_CHECKING:
    from engram.indexer.embedders.http import QueryBatching

Provider = Literal["local", "openai", "ollama"]
# Model jobs' (or POSTs') worth of queries that may wait for a query embedder.
QUERY_QUEUE_BATCHES = 32


@dataclass(frozen=True, slots=True)
class EmbedderConfig:
    """The embedding provider and its knobs (`ENGRAM_EMBED*`, `ENGRAM_OPENAI_*`,
    `ENGRAM_OLLAMA_*`)."""

    provider: Provider = "local"
    max_length: int = 256
    batch_size: int = 32
    # Padded tokens per run of the local model.
    batch_tokens: int = 512
    # Worker threads of the local model (jobs side by side), and their niceness.
    threads: int = 2
    nice: int = 0
    # Micro-batching of queries (the local model's jobs, the HTTP providers' POSTs): the
    # window after a query's arrival that later ones may join it in, and queries per job
    # (see `batching`).
    query_window_seconds: float = 0.0
    query_max_batch: int = 32
    timeout_seconds: float = 30.0
    max_retries: int = 4
    openai_base_url: str = "https://api.openai.com"
    openai_api_key: str | None = field(default=None, repr=False)
    openai_model: str = "text-embedding-3-small"
    openai_dimension: int | None = None
    ollama_url: str = "http://127.0.0.1:11434"
    ollama_model: str = "nomic-embed-text"
    ollama_dimension: int | None = None

    def for_queries(
        self, threads: int, *, window_seconds: float = 0.0, max_batch: int = 32
    ) -> EmbedderConfig:
        """Search's own query embedders: `threads` threads at the process's priority,
        concurrent queries batched within `window_seconds`, up to `max_batch` per job."""
        return replace(
            self,
            threads=threads,
            nice=0,
            query_window_seconds=window_seconds,
            query_max_batch=max_batch,
        )


def configured_embedder(config: EmbedderConfig) -> Embedder:
    """The embedder of the configured provider and model."""
    if config.provider == "openai":
        return _build(config, "openai", config.openai_model, config.openai_dimension)
    if config.provider == "ollama":
        return _build(config, "ollama", config.ollama_model, config.ollama_dimension)
    return _build(config, "local", "", None)


def embedder_for_model(config: EmbedderConfig, model: ModelInfo) -> Embedder | None:
    """An embedder producing `model`'s vectors, built from its model id and the provider
    settings (base URL, key); None for a model id this cannot rebuild."""
    from engram.indexer.embedders.local import MODEL_ID as LOCAL_MODEL_ID

    if model.model_id == LOCAL_MODEL_ID:
        return _build(config, "local", "", None)
    provider, _, name = model.model_id.partition(":")
    if not name or provider not in ("openai", "ollama"):
        return None
    return _build(config, "openai" if provider == "openai" else "ollama", name, model.dimension)


def _build(
    config: EmbedderConfig, provider: Provider, name: str, dimension: int | None
) -> Embedder:
    if provider == "openai":
        from engram.indexer.embedders.openai import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder(
            base_url=config.openai_base_url,
            model=name,
            api_key=config.openai_api_key,
            dimension=dimension,
            batch_size=config.batch_size,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
            queries=_http_query_batching(config),
        )
    if provider == "ollama":
        from engram.indexer.embedders.ollama import OllamaEmbedder

        return OllamaEmbedder(
            url=config.ollama_url,
            model=name,
            dimension=dimension,
            batch_size=config.batch_size,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
            queries=_http_query_batching(config),
        )
    from engram.indexer.embedders.local import LocalOnnxEmbedder

    return LocalOnnxEmbedder(
        max_length=config.max_length,
        batch_size=config.batch_size,
        threads=config.threads,
        batch_tokens=config.batch_tokens,
        nice=config.nice,
        query_window=config.query_window_seconds,
        query_max_batch=config.query_max_batch,
        # Queries queued beyond this fail at once (UNAVAILABLE) instead of waiting.
        query_max_pending=config.query_max_batch * QUERY_QUEUE_BATCHES,
    )


def _http_query_batching(config: EmbedderConfig) -> QueryBatching:
    """The HTTP providers' query micro-batching, from the same settings as the local
    model's (queries per POST are further bounded by `batch_size`)."""
    from engram.indexer.embedders.http import QueryBatching

    return QueryBatching(
        window=config.query_window_seconds,
        max_batch=config.query_max_batch,
        max_pending=config.query_max_batch * QUERY_QUEUE_BATCHES,
    )
