"""The indexing part of `engram dev`: tantivy, the embedded vector index and the local
embedder (with its cache in the embedded database), the worker fed by the outbox relay, and
IndexerService. Search is composed on top of this.

The outbox is the durable queue: the relay hands each batch of events to
`OutboxIndexHandler` and clears them only after it returned, so a crash re-delivers what was
not indexed, and a failure is retried with the relay's backoff. A document that fails
`indexer_max_deliver` times in a row is given up on (logged, counted as a dead letter) so
it cannot hold up every later change; `engram reindex` brings it back.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from engram.allinone import EmbeddedCore, service_name
from engram.domain.chunks import ModelInfo
from engram.domain.errors import EngramError, Unavailable
from engram.domain.spaces import SpaceRef
from engram.events.ports import OutboxMessage
from engram.events.relay import OutboxRelay
from engram.events.sqlite_outbox import SqliteOutbox
from engram.indexer.embedders import build_embedder
from engram.indexer.embedding_cache import CachedEmbedder, SqliteEmbeddingCache
from engram.indexer.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexer.models import (
    IndexModels,
    ModelSwitch,
    close_embedder,
    embedder_for_model,
    known_model,
)
from engram.indexer.ports import Embedder
from engram.indexer.service import IndexerService, reindex_events
from engram.indexer.servicer import IndexerServicer
from engram.indexer.sources import RepositoryDocumentSource
from engram.indexer.vector.numpy_index import NumpyVectorIndex
from engram.indexer.worker import (
    DEAD_LETTERS,
    DocumentKey,
    IndexWorker,
    UndecodableEvent,
    coalesce,
    observe_lag,
    read_event,
)
from engram.runtime.server import ServiceRegistration
from engram.storage.sqlite_repository import SqliteDocumentRepository
from engram.v1 import indexer_pb2, indexer_pb2_grpc

log = logging.getLogger(__name__)

VECTOR_DIR = "vectors"


@dataclass
class EmbeddedIndexing:
    keyword: TantivyKeywordIndex
    vector: NumpyVectorIndex
    # Embeds document chunks through the embedding cache; queries go straight to the model.
    # This is the configured model, which during a switch is not yet the active one.
    embedder: CachedEmbedder
    # Which collections are written and which model is active; `models.for_model(model)`
    # is the query embedder for a model (search: ask it for `vector.active_model()`).
    models: IndexModels
    worker: IndexWorker
    service: IndexerService
    # Set while a model switch fills the new collection (and until it ends).
    switch: ModelSwitch | None = None

    @property
    def embedders(self) -> dict[str, Embedder]:
        """The embedders this process holds, by model id."""
        return self.models.embedders


class OutboxIndexHandler:
    """The relay's subscriber: indexes the documents a batch of events names."""

    def __init__(self, worker: IndexWorker, *, max_attempts: int) -> None:
        self._worker = worker
        self._max_attempts = max_attempts
        # Consecutive failed attempts per document.
        self._attempts: dict[DocumentKey, int] = {}

    async def __call__(self, messages: Sequence[OutboxMessage]) -> None:
        events = []
        for message in messages:
            try:
                events.append(read_event(message.payload))
            except UndecodableEvent as undecodable:
                DEAD_LETTERS.inc()
                log.error(
                    "outbox event dropped",
                    extra={"event_id": message.event_id, "error": undecodable.message},
                )
        groups = coalesce(events)
        results = await self._worker.index_many(
            (group[0].space, path) for (_, path), group in groups.items()
        )
        retry: list[Exception] = []
        for key, error in results.items():
            if error is None:
                self._attempts.pop(key, None)
                observe_lag(groups[key])
                continue
            attempts = self._attempts.get(key, 0) + 1
            if attempts < self._max_attempts:
                self._attempts[key] = attempts
                retry.append(error)
                continue
            self._attempts.pop(key, None)
            DEAD_LETTERS.inc()
            log.error(
                "indexing a document failed too often; giving up until it changes or is reindexed",
                extra={
                    "space_id": key[0],
                    "path": key[1],
                    "attempts": attempts,
                    "error": str(error),
                },
            )
        if retry:
            first = retry[0]
            if isinstance(first, EngramError):
                raise first
            raise Unavailable(f"indexing failed: {type(first).__name__}: {first}")


class OutboxReindexQueue:
    """Queues reindex requests in the embedded outbox, the same durable path as changes."""

    def __init__(self, repository: SqliteDocumentRepository, relay: OutboxRelay) -> None:
        self._repository = repository
        self._relay = relay

    async def enqueue(self, documents: Sequence[tuple[SpaceRef, str]]) -> None:
        await self._repository.record_events(reindex_events(documents))
        self._relay.changed()


async def build_embedded_indexing(
    core: EmbeddedCore, stack: contextlib.AsyncExitStack
) -> EmbeddedIndexing:
    """Opens the indexes under the data directory, subscribes the worker to the relay and
    registers IndexerService; closes everything when `stack` unwinds."""
    settings = core.settings
    keyword = TantivyKeywordIndex.from_settings(settings)
    await keyword.open()
    stack.push_async_callback(keyword.close)
    vector = NumpyVectorIndex(settings.data_dir / VECTOR_DIR)
    await vector.open()
    stack.push_async_callback(vector.close)
    model = build_embedder(settings)
    stack.push_async_callback(close_embedder, model)
    await known_model(model)
    cache = SqliteEmbeddingCache(core.database)
    embedder = CachedEmbedder(model, cache)

    def rebuild(info: ModelInfo) -> Embedder | None:
        raw = embedder_for_model(settings, info)
        if raw is None:
            return None
        stack.push_async_callback(close_embedder, raw)
        return CachedEmbedder(raw, cache)

    models = IndexModels(vector, embedder, factory=rebuild)
    await models.open()
    if models.pending is None:
        # One process owns this directory: a collection left by an interrupted switch's
        # drop (or an abandoned one) only costs memory.
        for dropped in await models.drop_inactive():
            log.info("dropped an inactive vector collection", extra={"model": dropped})
    source = RepositoryDocumentSource(core.repository)
    worker = IndexWorker(
        source,
        keyword,
        vector,
        models,
        chunk_size=settings.chunk_size,
        chunk_overlap=settings.chunk_overlap,
        concurrency=settings.indexer_concurrency,
    )
    core.publisher.subscribe(OutboxIndexHandler(worker, max_attempts=settings.indexer_max_deliver))

    switch: ModelSwitch | None = None
    if models.pending is not None:

        async def backfill(space: SpaceRef, path: str) -> object:
            return await worker.index(space, path, backfill=True)

        switch = ModelSwitch(
            models,
            vector,
            source.documents,
            backfill,
            drop_grace_seconds=settings.indexer_model_drop_grace_seconds,
        )
        switch.start()
        stack.push_async_callback(switch.stop)

    def switch_progress() -> int:
        return switch.indexed if switch is not None else 0

    service = IndexerService(
        core.authorizer,
        source,
        OutboxReindexQueue(core.repository, core.relay),
        models,
        vector,
        backlog=SqliteOutbox(core.database).backlog,
        switch_progress=switch_progress,
    )
    core.registrations.append(
        ServiceRegistration(
            service_name(indexer_pb2, "IndexerService"),
            lambda server: indexer_pb2_grpc.add_IndexerServiceServicer_to_server(
                IndexerServicer(service), server
            ),
        )
    )
    return EmbeddedIndexing(
        keyword=keyword,
        vector=vector,
        embedder=embedder,
        models=models,
        worker=worker,
        service=service,
        switch=switch,
    )
