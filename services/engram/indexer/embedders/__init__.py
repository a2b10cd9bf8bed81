"""Embedders: the bundled local model and the HTTP providers, chosen by configuration."""

from __future__ import annotations

from engram.indexer.ports import Embedder
from engram.runtime.settings import Settings


def build_embedder(settings: Settings) -> Embedder:
    """The embedder `ENGRAM_EMBEDDER_PROVIDER` names, configured from the settings.

    Builds no connection and loads no model: the local model loads on first use, the HTTP
    clients connect on first request.
    """
    if settings.embedder_provider == "openai":
        from engram.indexer.embedders.openai import OpenAICompatibleEmbedder

        key = settings.openai_api_key
        return OpenAICompatibleEmbedder(
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            api_key=key.get_secret_value() if key is not None else None,
            dimension=settings.openai_dimension,
            batch_size=settings.embed_batch_size,
            timeout=settings.embed_timeout_seconds,
            max_retries=settings.embed_max_retries,
        )
    if settings.embedder_provider == "ollama":
        from engram.indexer.embedders.ollama import OllamaEmbedder

        return OllamaEmbedder(
            url=settings.ollama_url,
            model=settings.ollama_model,
            dimension=settings.ollama_dimension,
            batch_size=settings.embed_batch_size,
            timeout=settings.embed_timeout_seconds,
            max_retries=settings.embed_max_retries,
        )
    from engram.indexer.embedders.local import LocalOnnxEmbedder

    return LocalOnnxEmbedder(
        max_length=settings.embed_max_length,
        batch_size=settings.embed_batch_size,
        threads=settings.embed_threads,
        nice=settings.indexing_nice,
    )
