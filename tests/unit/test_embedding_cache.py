"""CachedEmbedder over the real local model, and the SQLite embedding cache."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from engram.backends.sqlite import SqliteDatabase
from engram.domain.chunking import chunk_text
from engram.indexer.embedders.local import DIMENSION, LocalOnnxEmbedder
from engram.indexer.embedding_cache import (
    SCHEMA,
    CachedEmbedder,
    SqliteEmbeddingCache,
    text_sha256,
)


@pytest.fixture(scope="module")
def local_embedder() -> Iterator[LocalOnnxEmbedder]:
    embedder = LocalOnnxEmbedder()
    yield embedder
    embedder.close()


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    db = SqliteDatabase(tmp_path / "engram.sqlite3")
    await db.open([SCHEMA])
    yield db
    await db.close()


def paragraphs(count: int, start: int = 0) -> str:
    return "\n\n".join(
        f"Entry {n}: the agent noted that build {n} of the indexer passed, "
        f"and that the vector index for space {n % 7} answered in under a millisecond. "
        f"Follow-up {n}: keep the append path cheap."
        for n in range(start, start + count)
    )


async def test_an_append_re_embeds_only_the_new_tail(
    database: SqliteDatabase, local_embedder: LocalOnnxEmbedder
) -> None:
    cached = CachedEmbedder(local_embedder, SqliteEmbeddingCache(database))
    document = paragraphs(12)
    first = chunk_text(document)
    assert len(first) >= 5
    await cached.embed_documents(first)
    assert cached.embedded_texts == len(first)

    appended = chunk_text(document + "\n\n" + paragraphs(1, start=12))
    unchanged = sum(1 for chunk in appended if chunk in set(first))
    vectors = await cached.embed_documents(appended)
    assert unchanged >= len(first) - 1
    assert cached.embedded_texts == len(first) + (len(appended) - unchanged)
    assert cached.cache_hits == unchanged
    # Cached or fresh, every row is the model's embedding of its own text.
    direct = await local_embedder.embed_documents(appended)
    assert np.allclose(vectors, direct, atol=1e-5)


async def test_duplicates_and_repeats_are_embedded_once(
    database: SqliteDatabase, local_embedder: LocalOnnxEmbedder
) -> None:
    cached = CachedEmbedder(local_embedder, SqliteEmbeddingCache(database))
    texts = ["alpha", "beta", "alpha", "gamma", "beta"]
    vectors = await cached.embed_documents(texts)
    assert cached.embedded_texts == 3
    assert vectors.shape == (5, DIMENSION)
    assert np.array_equal(vectors[0], vectors[2]) and np.array_equal(vectors[1], vectors[4])
    again = await cached.embed_documents(list(reversed(texts)))
    assert cached.embedded_texts == 3
    assert np.array_equal(again, vectors[::-1])
    assert (await cached.embed_documents([])).shape == (0, DIMENSION)


async def test_queries_bypass_the_persistent_cache(
    database: SqliteDatabase, local_embedder: LocalOnnxEmbedder
) -> None:
    cache = SqliteEmbeddingCache(database)
    cached = CachedEmbedder(local_embedder, cache)
    query = await cached.embed_query("what did the agent note?")
    assert query.shape == (DIMENSION,)
    model_id = local_embedder.model.model_id
    assert await cache.get_many(model_id, [text_sha256("what did the agent note?")]) == {}


async def test_a_damaged_cache_row_is_embedded_again(
    database: SqliteDatabase, local_embedder: LocalOnnxEmbedder
) -> None:
    cache = SqliteEmbeddingCache(database)
    model_id = local_embedder.model.model_id
    await cache.put_many(model_id, {text_sha256("alpha"): np.ones(3, np.float32)})
    cached = CachedEmbedder(local_embedder, cache)
    vector = await cached.embed_documents(["alpha"])
    assert cached.embedded_texts == 1
    assert vector.shape == (1, DIMENSION)
    assert (await cache.get_many(model_id, [text_sha256("alpha")]))[text_sha256("alpha")].shape == (
        DIMENSION,
    )


async def test_sqlite_cache_round_trip_per_model(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    db = SqliteDatabase(path)
    await db.open([SCHEMA])
    cache = SqliteEmbeddingCache(db)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 5)).astype(np.float32)
    await cache.put_many("m1", {"h-a": a, "h-b": b})
    await cache.put_many("m2", {"h-a": b})
    await cache.put_many("m1", {})
    found = await cache.get_many("m1", ["h-a", "h-b", "h-missing", "h-a"])
    assert set(found) == {"h-a", "h-b"}
    assert np.array_equal(found["h-a"], a) and found["h-a"].dtype == np.float32
    assert np.array_equal((await cache.get_many("m2", ["h-a"]))["h-a"], b)
    assert await cache.get_many("m1", []) == {}
    await db.close()

    # It is on disk: a new database object over the same file sees it.
    reopened = SqliteDatabase(path)
    await reopened.open([SCHEMA])
    try:
        hashes = [f"h-{n}" for n in range(1200)]
        await SqliteEmbeddingCache(reopened).put_many(
            "m1", {h: np.full(5, n, np.float32) for n, h in enumerate(hashes)}
        )
        # More keys than one statement binds.
        many = await SqliteEmbeddingCache(reopened).get_many("m1", ["h-a", *hashes])
        assert len(many) == 1201
        assert many["h-1199"][0] == 1199
        assert np.array_equal(many["h-a"], a)
    finally:
        await reopened.close()
