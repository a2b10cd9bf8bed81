"""OllamaEmbedder: an Ollama server's `POST /api/embed`."""

from __future__ import annotations

from typing import Any

import httpx

from engram.indexer.embedders.http import HttpEmbedder, JsonPoster, QueryBatching


class OllamaEmbedder(HttpEmbedder):
    """`{"model", "input": [...]}` to `{url}/api/embed`, answered by `{"embeddings": [...]}`."""

    provider = "Ollama"
    id_prefix = "ollama"
    dimension_setting = "ENGRAM_OLLAMA_DIMENSION"

    def __init__(
        self,
        *,
        url: str,
        model: str,
        dimension: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 4,
        base_backoff: float = 0.5,
        client: httpx.AsyncClient | None = None,
        queries: QueryBatching | None = None,
    ) -> None:
        super().__init__(
            url=url.rstrip("/") + "/api/embed",
            model=model,
            dimension=dimension,
            batch_size=batch_size,
            poster=JsonPoster(
                provider=self.provider,
                timeout=timeout,
                max_retries=max_retries,
                base_backoff=base_backoff,
                client=client,
            ),
            queries=queries,
        )

    def _rows(self, answer: Any) -> list[Any]:
        return list(answer["embeddings"])
