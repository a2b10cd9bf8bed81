"""Query embedders: one per embedding model, owned by search.

The active vector model (the collection the alias names) decides which model embeds a query;
this builds that model's embedder on first use, from its model id and the settings. Search
owns these instances rather than borrowing the indexer's: the indexer's local model runs
document jobs on its few worker threads, and a query queued behind document batches waited
0.7 s at the median and 3 s at worst during an import (measured; with its own instance,
13 ms). Queries also get their own thread count (ENGRAM_SEARCH_EMBED_THREADS, default 1),
which leaves the other core to the BM25 leg running at the same time, and their own
micro-batching: concurrent queries share model jobs (ENGRAM_SEARCH_EMBED_BATCH_WINDOW_MS,
ENGRAM_SEARCH_EMBED_MAX_BATCH; see `engram.indexer.embedders.batching`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from engram.domain.chunks import ModelInfo
from engram.indexer.embedders import EmbedderConfig, embedder_for_model
from engram.indexer.models import close_embedder, warm_embedder
from engram.indexes.ports import Embedder

EmbedderFactory = Callable[[ModelInfo], Embedder | None]


class ModelEmbedders:
    """`QueryEmbedders` building one embedder per model with `factory`, kept for later."""

    def __init__(self, factory: EmbedderFactory, *, owns_embedders: bool = True) -> None:
        self._factory = factory
        self._owns = owns_embedders
        self._built: dict[str, Embedder | None] = {}

    @classmethod
    def from_config(cls, config: EmbedderConfig) -> ModelEmbedders:
        """Embedders rebuilt from the model id with the provider settings (URL, key)."""
        return cls(partial(embedder_for_model, config))

    async def warm(self, model: ModelInfo | None) -> None:
        """Builds `model`'s embedder and runs one query through it, so the first search
        does not pay for loading the model."""
        embedder = self.for_model(model) if model is not None else None
        if embedder is not None:
            await warm_embedder(embedder)

    @classmethod
    def serving(cls, *embedders: Embedder) -> ModelEmbedders:
        """Only these embedders, each for its own model; their owner closes them."""
        by_id = {embedder.model.model_id: embedder for embedder in embedders}
        return cls(lambda model: by_id.get(model.model_id), owns_embedders=False)

    def for_model(self, model: ModelInfo) -> Embedder | None:
        if model.model_id not in self._built:
            self._built[model.model_id] = self._factory(model)
        embedder = self._built[model.model_id]
        if embedder is None or embedder.model.dimension != model.dimension:
            return None
        return embedder

    async def aclose(self) -> None:
        """Closes the embedders built here (unless they belong to someone else)."""
        built = [embedder for embedder in self._built.values() if embedder is not None]
        self._built.clear()
        if self._owns:
            for embedder in built:
                await close_embedder(embedder)
