"""MongoEmbeddingCache on a real MongoDB wire-protocol server (FerretDB from deploy/local, or
ENGRAM_TEST_MONGO_URI)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from pymongo import AsyncMongoClient

from engram.indexer.embedding_cache import MongoEmbeddingCache

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]


@pytest.fixture
async def cache_db(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The shared `mongo_database` fixture where the suite has one; otherwise a fresh
    database on the session's real Mongo backend."""
    try:
        yield request.getfixturevalue("mongo_database")
        return
    except pytest.FixtureLookupError:
        pass
    url = request.getfixturevalue("real_backends").url("mongo")
    client: Any = AsyncMongoClient(url, serverSelectionTimeoutMS=10_000)
    name = f"engram_cache_{uuid.uuid4().hex[:12]}"
    try:
        yield client[name]
    finally:
        await client.drop_database(name)
        await client.close()


async def test_round_trip_per_model(cache_db: Any) -> None:
    cache = MongoEmbeddingCache(cache_db)
    await cache.ensure_indexes()
    await cache.ensure_indexes()
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 384)).astype(np.float32)
    await cache.put_many("minilm", {"h-a": a, "h-b": b})
    await cache.put_many("openai:m", {"h-a": b})
    await cache.put_many("minilm", {})

    found = await cache.get_many("minilm", ["h-a", "h-b", "h-missing", "h-a"])
    assert set(found) == {"h-a", "h-b"}
    assert np.array_equal(found["h-a"], a)
    assert found["h-a"].dtype == np.float32
    assert np.array_equal((await cache.get_many("openai:m", ["h-a"]))["h-a"], b)
    assert await cache.get_many("minilm", []) == {}

    # Stored as documents keyed "<model>:<sha>" holding BSON binary.
    stored = await cache_db[MongoEmbeddingCache.COLLECTION].find_one({"_id": "minilm:h-a"})
    assert stored is not None and stored["model_id"] == "minilm"
    assert bytes(stored["vector"]) == a.astype("<f4").tobytes()


async def test_put_overwrites_and_many_keys_round_trip(cache_db: Any) -> None:
    cache = MongoEmbeddingCache(cache_db)
    await cache.ensure_indexes()
    await cache.put_many("m", {"h": np.zeros(4, np.float32)})
    await cache.put_many("m", {"h": np.ones(4, np.float32)})
    assert np.array_equal((await cache.get_many("m", ["h"]))["h"], np.ones(4, np.float32))
    hashes = [f"{n:064x}" for n in range(600)]
    await cache.put_many("m", {h: np.full(4, n, np.float32) for n, h in enumerate(hashes)})
    found = await cache.get_many("m", hashes)
    assert len(found) == 600
    assert found[hashes[599]][0] == 599
