"""The parts `engram dev` and `engram serve indexer|search` share, built on whichever
adapters the process chose: the indexing pipeline and the search service."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from engram.app.config import Components
from engram.domain.chunks import ModelInfo
from engram.domain.ports import Authorizer
from engram.domain.spaces import SpaceRef
from engram.indexer.embedders import configured_embedder, embedder_for_model
from engram.indexer.embedding_cache import CachedEmbedder
from engram.indexer.models import (
    IndexModels,
    ModelSwitch,
    close_embedder,
    known_model,
    warm_embedder,
)
from engram.indexer.sources import DocumentSource
from engram.indexer.worker import IndexWorker
from engram.indexes.ports import (
    Embedder,
    EmbeddingCache,
    IndexUnavailable,
    KeywordIndex,
    VectorIndex,
)
from engram.indexes.progress import IndexProgress, ProgressReader
from engram.runtime.rate_limit import RateLimitStore
from engram.search.embedders import ModelEmbedders
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchService
from engram.workspace.agent_state import AgentStateStore
from engram.workspace.ports import WorkspaceDocuments, WorkspaceSearch
from engram.workspace.service import WorkspaceService, utc_now
from engram.workspace.templates import load_templates
from engram.workspace.write_limits import WorkspaceWriteLimiter

log = logging.getLogger(__name__)


@dataclass
class Indexing:
    """The indexing pipeline of a process (tests and benchmarks look inside)."""

    keyword: KeywordIndex
    vector: VectorIndex
    # Embeds document chunks through the embedding cache; queries go straight to the model.
    # This is the configured model, which during a switch is not yet the active one.
    embedder: CachedEmbedder
    # Which collections are written and which model is active.
    models: IndexModels
    worker: IndexWorker
    # Set while a model switch fills the new collection (started by the process builder).
    switch: ModelSwitch | None
    # Where the worker records what each index holds (read-your-writes).
    progress: IndexProgress | None = None

    @property
    def embedders(self) -> dict[str, Embedder]:
        """The embedders this process holds, by model id."""
        return self.models.embedders

    def switch_progress(self) -> int:
        return self.switch.indexed if self.switch is not None else 0


async def build_indexing(
    components: Components,
    stack: contextlib.AsyncExitStack,
    *,
    keyword: KeywordIndex,
    vector: VectorIndex,
    cache: EmbeddingCache,
    source: DocumentSource,
    sole_owner: bool,
    progress: IndexProgress | None = None,
) -> Indexing:
    """Opens both indexes and the configured embedder (model loaded, one inference run),
    the model registry and the worker; a pending model switch is built, not started.

    `sole_owner`: this process alone uses the vector index, so collections left inactive
    by an interrupted switch can be dropped at start. `progress`: where the worker records
    what each index holds, for read-your-writes searches.
    """
    await keyword.open()
    stack.push_async_callback(keyword.close)
    await vector.open()
    stack.push_async_callback(vector.close)
    config = components.embedder
    model = configured_embedder(config)
    stack.push_async_callback(close_embedder, model)
    await known_model(model)
    await warm_embedder(model)
    embedder = CachedEmbedder(model, cache)

    def rebuild(info: ModelInfo) -> Embedder | None:
        raw = embedder_for_model(config, info)
        if raw is None:
            return None
        stack.push_async_callback(close_embedder, raw)
        return CachedEmbedder(raw, cache)

    models = IndexModels(vector, embedder, factory=rebuild)
    await models.open()
    if sole_owner and models.pending is None:
        for dropped in await models.drop_inactive():
            log.info("dropped an inactive vector collection", extra={"model": dropped})
    indexing = components.indexing
    worker = IndexWorker(
        source,
        keyword,
        vector,
        models,
        chunk_size=indexing.chunk_size,
        chunk_overlap=indexing.chunk_overlap,
        concurrency=indexing.concurrency,
        progress=progress,
    )
    switch: ModelSwitch | None = None
    if models.pending is not None:

        async def backfill(space: SpaceRef, path: str) -> object:
            return await worker.index(space, path, backfill=True)

        switch = ModelSwitch(
            models,
            vector,
            source.documents,
            backfill,
            drop_grace_seconds=indexing.drop_grace_seconds,
        )
    return Indexing(keyword, vector, embedder, models, worker, switch, progress)


def start_switch(indexing: Indexing, stack: contextlib.AsyncExitStack) -> None:
    if indexing.switch is not None:
        indexing.switch.start()
        stack.push_async_callback(indexing.switch.stop)


async def build_search(
    components: Components,
    stack: contextlib.AsyncExitStack,
    *,
    keyword: KeywordIndex,
    vector: VectorIndex,
    authorizer: Authorizer,
    progress: ProgressReader | None = None,
) -> SearchService:
    """SearchService on opened indexes, with its own query embedders; the active model's
    embedder is loaded and has run once before this returns. `progress`: the indexer's
    records (its store in one process, its GetIndexProgress otherwise), for searches that
    carry positions (without it they answer degraded)."""
    embedders = ModelEmbedders.from_config(components.query_embedder)
    stack.push_async_callback(embedders.aclose)
    try:
        model = await vector.active_model()
    except IndexUnavailable:
        # Opened again in the background; the first query loads the embedder then.
        model = None
    await embedders.warm(model)
    return SearchService(
        keyword,
        vector,
        embedders,
        authorizer,
        options=components.search,
        query_cache=QueryEmbeddingCache(components.query_cache_size),
        progress=progress,
    )


def build_workspace(
    components: Components,
    *,
    documents: WorkspaceDocuments,
    search: WorkspaceSearch,
    authorizer: Authorizer,
    rate_limits: RateLimitStore,
    agents: AgentStateStore,
    clock: Callable[[], datetime] = utc_now,
) -> WorkspaceService:
    """WorkspaceService on the process's documents and search (in process or remote), its
    write limits counted in `rate_limits`, the seed templates loaded (a bad override stops
    the process here, naming the file)."""
    return WorkspaceService(
        documents,
        search,
        authorizer,
        WorkspaceWriteLimiter(rate_limits, components.workspace_writes),
        agents,
        load_templates(components.workspace_templates),
        clock=clock,
        policy=components.workspace_policy,
        min_relevance=components.workspace_min_relevance,
    )
