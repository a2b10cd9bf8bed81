"""What the HTTP embedders share: one POST with retries, error mapping to the port's, and
micro-batching of concurrent queries into shared POSTs."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from engram.domain.chunks import ModelInfo
from engram.indexer.embedders.batching import EmbeddingBatcher
from engram.indexer.embedders.vectors import l2_normalise
from engram.indexes.ports import IndexUnavailable, Vectors

# Worth another try: rate limits and the gateway/overload family.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_BACKOFF_SECONDS = 20.0
# Query POSTs in flight at once. The provider's model runs on its own machines, not on our
# cores, so one POST at a time would only serialise queries behind a slow round trip; a few
# in flight keep a slow provider from queueing every query, while the queries arriving
# during them still collect into the next POSTs (and a provider's rate limit is met by
# far fewer requests than one per query).
QUERY_POSTS_IN_FLIGHT = 4


@dataclass(frozen=True, slots=True)
class QueryBatching:
    """How concurrent `embed_query` calls share POSTs (see `batching.EmbeddingBatcher`):
    queries arriving within `window` seconds of the first waiting one go together, at most
    `max_batch` per POST (and never more than the embedder's `batch_size`), at most
    `posts_in_flight` POSTs at once; beyond `max_pending` queued queries a query fails at
    once with IndexUnavailable. Search sets these from ENGRAM_SEARCH_EMBED_BATCH_WINDOW_MS
    and ENGRAM_SEARCH_EMBED_MAX_BATCH; the default (window 0) only groups queries that
    arrive while every POST slot is busy. With one query per POST (`max_batch` or the
    embedder's `batch_size` 1) nothing can be shared, so there is no batching at all: each
    query is its own POST, sent at once, as many in flight as there are queries (bounding
    them would only queue queries)."""

    window: float = 0.0
    max_batch: int = 32
    max_pending: int = 1024
    posts_in_flight: int = QUERY_POSTS_IN_FLIGHT


class _Retriable(Exception):
    """A failed attempt worth another, and the wait the provider asked for (Retry-After)."""

    def __init__(self, problem: str, retry_after: float | None = None) -> None:
        super().__init__(problem)
        self.retry_after = retry_after


class JsonPoster:
    """POSTs JSON to one provider, retrying with exponential backoff and jitter (tenacity)."""

    def __init__(
        self,
        *,
        provider: str,
        timeout: float,
        max_retries: int,
        base_backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._provider = provider
        self._max_retries = max_retries
        # Full jitter: replicas that failed together do not retry together.
        self._jitter = wait_random_exponential(multiplier=base_backoff, max=MAX_BACKOFF_SECONDS)
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._headers = dict(headers or {})
        self._timeout = timeout

    async def post(self, url: str, body: Mapping[str, Any]) -> Any:
        """The decoded JSON response; IndexUnavailable once the retries are spent."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Retriable),
        )
        try:
            async for attempt in retrying:
                with attempt:
                    answer = await self._post_once(url, body)
        except RetryError as error:
            last = error.last_attempt
            raise IndexUnavailable(
                f"{last.exception()} (gave up after {last.attempt_number} attempts)"
            ) from None
        return answer

    async def _post_once(self, url: str, body: Mapping[str, Any]) -> Any:
        try:
            response = await self._client.post(
                url, json=body, headers=self._headers, timeout=self._timeout
            )
        except httpx.TimeoutException:
            raise _Retriable(
                f"{self._provider} embeddings at {url} timed out after {self._timeout}s"
            ) from None
        except httpx.TransportError as error:
            raise _Retriable(
                f"cannot reach {self._provider} embeddings at {url}: {error!r}"
            ) from None
        if response.status_code < 300:
            try:
                return response.json()
            except ValueError:
                raise IndexUnavailable(
                    f"{self._provider} embeddings at {url} answered with invalid JSON"
                ) from None
        problem = (
            f"{self._provider} embeddings at {url} answered HTTP "
            f"{response.status_code}: {_snippet(response)}"
        )
        if response.status_code not in RETRY_STATUSES:
            raise IndexUnavailable(problem)
        raise _Retriable(problem, _retry_after(response))

    def _wait(self, state: RetryCallState) -> float:
        """What the provider asked for (capped), else the jittered exponential backoff."""
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, _Retriable) and error.retry_after is not None:
            return min(error.retry_after, MAX_BACKOFF_SECONDS)
        return self._jitter(state)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _snippet(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:200] if text else "(empty body)"


class HttpEmbedder(ABC):
    """Batching, dimension discovery and normalisation for an HTTP embedding API.

    The dimension is the configured one, or the one the first response shows; `model`
    can only be read once it is known (call `probe()` first when it is not configured).

    Documents go out as they come, `batch_size` texts per POST. Concurrent queries share
    POSTs (`queries`, see `QueryBatching`): each caller gets its own row; a POST that fails
    fails each of its callers with the IndexUnavailable a lone query would get.
    """

    #: Shown in errors, e.g. "Ollama".
    provider = "HTTP"
    #: The model id prefix, e.g. "ollama" for "ollama:nomic-embed-text".
    id_prefix = "http"
    #: The setting that fixes the dimension, named in errors.
    dimension_setting = ""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        dimension: int | None,
        batch_size: int,
        poster: JsonPoster,
        queries: QueryBatching | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._url = url
        self._model_name = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._poster = poster
        batching = queries or QueryBatching()
        max_batch = min(batching.max_batch, batch_size)
        self._queries = (
            EmbeddingBatcher(
                self._embed_queries,
                window=batching.window,
                max_batch=max_batch,
                max_pending=max(batching.max_pending, max_batch),
                name="query",
                parallel=batching.posts_in_flight,
                # A POST whose callers were all cancelled is cancelled, as a lone query's POST
                # is: it would hold a slot through its timeout and retries for nobody.
                cancel_abandoned=True,
            )
            if max_batch > 1
            else None
        )

    @property
    def model(self) -> ModelInfo:
        if self._dimension is None:
            raise IndexUnavailable(
                f"the dimension of {self.provider} model {self._model_name!r} is not known "
                f"yet: configure it ({self.dimension_setting}) or await probe() first"
            )
        return ModelInfo(model_id=f"{self.id_prefix}:{self._model_name}", dimension=self._dimension)

    async def probe(self) -> ModelInfo:
        """Learns the dimension from one embedding when it was not configured."""
        if self._dimension is None:
            await self.embed_documents(["dimension probe"])
        return self.model

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.empty((0, self._dimension or 0), dtype=np.float32)
        parts = [
            await self._embed_batch(list(texts[start : start + self._batch_size]))
            for start in range(0, len(texts), self._batch_size)
        ]
        matrix = np.concatenate(parts, axis=0)
        # Cheap for a document's chunks; a large import should not stall the loop.
        if matrix.size > 200_000:
            return await asyncio.to_thread(l2_normalise, matrix)
        return l2_normalise(matrix)

    async def embed_query(self, text: str) -> Vectors:
        if self._queries is None:
            vectors = await self._embed_queries([text])
        else:
            vectors = await self._queries.embed([text])
        row: Vectors = vectors[0]
        return row

    async def aclose(self) -> None:
        """Fails the queries still queued or in flight, then closes the HTTP client."""
        if self._queries is not None:
            await self._queries.aclose()
        await self._poster.aclose()

    @abstractmethod
    def _rows(self, answer: Any) -> list[Any]:
        """The vectors of one response, in input order."""

    async def _embed_queries(self, texts: list[str]) -> Vectors:
        """One POST for the queued queries (at most `batch_size` of them)."""
        return l2_normalise(await self._embed_batch(texts))

    async def _embed_batch(self, batch: list[str]) -> Vectors:
        answer = await self._poster.post(self._url, {"model": self._model_name, "input": batch})
        try:
            rows = self._rows(answer)
            matrix = np.asarray(rows, dtype=np.float32)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise IndexUnavailable(
                f"{self.provider} embeddings: unexpected response shape from {self._url}"
            ) from None
        if matrix.ndim != 2 or matrix.shape[0] != len(batch) or matrix.shape[1] == 0:
            raise IndexUnavailable(
                f"{self.provider} embeddings: asked for {len(batch)} vectors, got an array "
                f"of shape {matrix.shape}"
            )
        if not np.isfinite(matrix).all():
            raise IndexUnavailable(f"{self.provider} embeddings: non-finite values returned")
        if self._dimension is None:
            self._dimension = int(matrix.shape[1])
        elif matrix.shape[1] != self._dimension:
            raise IndexUnavailable(
                f"{self.provider} model {self._model_name!r} returned {matrix.shape[1]} "
                f"dimensions, expected {self._dimension}"
            )
        return matrix
