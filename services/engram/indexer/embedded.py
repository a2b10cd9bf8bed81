"""The indexing part of `engram dev`: tantivy, the embedded vector index and the local
embedder (with its cache in the embedded database). The indexer worker and search are
composed on top of this."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from engram.allinone import EmbeddedCore
from engram.indexer.embedders import build_embedder
from engram.indexer.embedding_cache import CachedEmbedder, SqliteEmbeddingCache
from engram.indexer.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexer.ports import Embedder
from engram.indexer.vector.numpy_index import NumpyVectorIndex

VECTOR_DIR = "vectors"


@dataclass
class EmbeddedIndexing:
    keyword: TantivyKeywordIndex
    vector: NumpyVectorIndex
    # Embeds document chunks through the embedding cache; queries go straight to the model.
    embedder: CachedEmbedder


async def _close_embedder(embedder: Embedder) -> None:
    aclose = getattr(embedder, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    close = getattr(embedder, "close", None)
    if close is not None:
        await asyncio.to_thread(close)


async def build_embedded_indexing(
    core: EmbeddedCore, stack: contextlib.AsyncExitStack
) -> EmbeddedIndexing:
    """Opens the indexes under the data directory; closes them when `stack` unwinds."""
    settings = core.settings
    keyword = TantivyKeywordIndex.from_settings(settings)
    await keyword.open()
    stack.push_async_callback(keyword.close)
    vector = NumpyVectorIndex(settings.data_dir / VECTOR_DIR)
    await vector.open()
    stack.push_async_callback(vector.close)
    model = build_embedder(settings)
    stack.push_async_callback(_close_embedder, model)
    embedder = CachedEmbedder(model, SqliteEmbeddingCache(core.database))
    return EmbeddedIndexing(keyword=keyword, vector=vector, embedder=embedder)
