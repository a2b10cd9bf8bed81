"""OpenAICompatibleEmbedder: any server speaking OpenAI's `POST /v1/embeddings`."""

from __future__ import annotations

from typing import Any

import httpx

from engram.indexer.embedders.http import HttpEmbedder, JsonPoster, QueryBatching


class OpenAICompatibleEmbedder(HttpEmbedder):
    """`{"model", "input": [...]}` to `{base_url}/v1/embeddings` with a bearer key."""

    provider = "OpenAI-compatible"
    id_prefix = "openai"
    dimension_setting = "ENGRAM_OPENAI_DIMENSION"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 128,
        timeout: float = 30.0,
        max_retries: int = 4,
        base_backoff: float = 0.5,
        client: httpx.AsyncClient | None = None,
        queries: QueryBatching | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(
            url=base_url.rstrip("/") + "/v1/embeddings",
            model=model,
            dimension=dimension,
            batch_size=batch_size,
            poster=JsonPoster(
                provider=self.provider,
                timeout=timeout,
                max_retries=max_retries,
                base_backoff=base_backoff,
                headers=headers,
                client=client,
            ),
            queries=queries,
        )

    def _rows(self, answer: Any) -> list[Any]:
        # The API may return the items in any order; each carries its input index.
        items = sorted(answer["data"], key=lambda item: int(item["index"]))
        return [item["embedding"] for item in items]
