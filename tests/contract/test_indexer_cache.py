"""The production indexer's embedding cache on FerretDB (or ENGRAM_TEST_MONGO_URI):
`MongoIdEmbeddingCache` answers like MongoEmbeddingCache, on the same documents, with only
`_id` lookups and inserts, so a lookup stays cheap as the cache grows."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from pymongo import AsyncMongoClient

from engram.indexer.embedding_cache import MongoEmbeddingCache, MongoIdEmbeddingCache
from tests.support.backends import RealBackends

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]


@pytest.fixture
async def database(real_backends: RealBackends) -> AsyncIterator[Any]:
    client: Any = AsyncMongoClient(real_backends.url("mongo"), serverSelectionTimeoutMS=10_000)
    name = f"engram_idcache_{uuid.uuid4().hex[:12]}"
    try:
        yield client[name]
    finally:
        await client.drop_database(name)
        await client.close()


async def test_round_trip_duplicates_and_the_shared_format(database: Any) -> None:
    cache = MongoIdEmbeddingCache(database)
    await cache.ensure_indexes()
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 384)).astype(np.float32)
    await cache.put_many("minilm", {"h-a": a, "h-b": b})
    await cache.put_many("openai:m", {"h-a": b})
    await cache.put_many("minilm", {"h-a": a, "h-c": b})  # h-a is already there
    await cache.put_many("minilm", {})
    found = await cache.get_many("minilm", ["h-a", "h-b", "h-c", "h-missing", "h-a"])
    assert set(found) == {"h-a", "h-b", "h-c"}
    assert np.array_equal(found["h-a"], a) and found["h-a"].dtype == np.float32
    assert np.array_equal((await cache.get_many("openai:m", ["h-a"]))["h-a"], b)
    assert await cache.get_many("minilm", []) == {}
    # The documents are MongoEmbeddingCache's: either adapter reads the other's.
    assert set(await MongoEmbeddingCache(database).get_many("minilm", ["h-a", "h-c"])) == {
        "h-a",
        "h-c",
    }


async def test_a_lookup_stays_cheap_as_the_cache_grows(database: Any) -> None:
    cache = MongoIdEmbeddingCache(database)
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((2000, 384)).astype(np.float32)
    keys = [f"h{i}" for i in range(len(vectors))]
    for start in range(0, len(keys), 500):
        await cache.put_many(
            "m", dict(zip(keys[start : start + 500], vectors[start:], strict=False))
        )

    async def lookups() -> float:
        started = time.perf_counter()
        for i in range(10):
            await cache.get_many("m", keys[i * 4 : i * 4 + 4])
        return (time.perf_counter() - started) / 10

    per_lookup = await lookups()
    assert per_lookup < 0.1, f"{per_lookup * 1000:.0f} ms per 4-vector lookup in 2,000"
