"""Query embeddings: a small in-memory LRU, and one embedding per query text in flight.

Agents repeat queries (a retry, the same question in a loop, several agents of one bot), and
embedding one is most of a hybrid search's time, so the last `size` query vectors are kept,
keyed by (model id, query text with whitespace collapsed). Concurrent misses on the same key
share one embedding; a caller that gives up (its deadline passed) leaves it running, so the
vector still lands in the cache for the next one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

import numpy as np
from prometheus_client import Counter, Histogram

from engram.indexes.ports import Embedder, Vectors

QUERY_CACHE = Counter(
    "engram_search_query_cache_total",
    "Query embedding lookups, by outcome (hit, miss, shared: joined one in flight).",
    ("outcome",),
)
QUERY_EMBEDDING_SECONDS = Histogram(
    "engram_search_query_embedding_seconds",
    "Time to embed one query (cache misses only).",
    buckets=(0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1, 2.5),
)


def normalize_query(text: str) -> str:
    """The text that is embedded and cached: whitespace runs collapsed, ends trimmed."""
    return " ".join(text.split())


class QueryEmbeddingCache:
    """Embeds queries through the model's embedder, remembering the last `size` vectors.

    `size` 0 keeps nothing (concurrent identical queries still share one embedding).
    Returned vectors are read-only: they are shared between requests.
    """

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self._size = size
        self._items: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._in_flight: dict[tuple[str, str], asyncio.Task[Vectors]] = {}

    def __len__(self) -> int:
        return len(self._items)

    async def embed(self, embedder: Embedder, model_id: str, text: str) -> Vectors:
        """The query vector of `text` under `model_id`, which `embedder` produces."""
        key = (model_id, normalize_query(text))
        vector = self._items.get(key)
        if vector is not None:
            self._items.move_to_end(key)
            QUERY_CACHE.labels("hit").inc()
            return vector
        task = self._in_flight.get(key)
        if task is None:
            QUERY_CACHE.labels("miss").inc()
            task = asyncio.create_task(self._embed(embedder, key))
            self._in_flight[key] = task
            task.add_done_callback(lambda done: self._settled(key, done))
        else:
            QUERY_CACHE.labels("shared").inc()
        return await asyncio.shield(task)

    def clear(self) -> None:
        self._items.clear()

    async def _embed(self, embedder: Embedder, key: tuple[str, str]) -> Vectors:
        started = time.perf_counter()
        vector = np.asarray(await embedder.embed_query(key[1]), dtype=np.float32)
        QUERY_EMBEDDING_SECONDS.observe(time.perf_counter() - started)
        vector.setflags(write=False)
        if self._size:
            self._items[key] = vector
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return vector

    def _settled(self, key: tuple[str, str], task: asyncio.Task[Vectors]) -> None:
        if self._in_flight.get(key) is task:
            del self._in_flight[key]
        if not task.cancelled():
            # Retrieved here, so a failure nobody waited for is not reported as unhandled;
            # the callers that did wait got it through the shield.
            task.exception()
