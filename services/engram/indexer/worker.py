"""IndexWorker: turns "this document changed" into both indexes holding its current chunks.

An event only names a document; the worker reads the document as it is *now* (a deleted one
removes its chunks), chunks it, embeds what the embedding cache lacks, and replaces the
path's chunks in the keyword index and in every vector collection being written (the active
model's, and a pending model's during a switch). Then it reads the document again: if
storage moved on meanwhile, it indexes again. So duplicate, stale and out-of-order events are
harmless, and after quiescence the indexes equal the store:

* A pass that wrote a state and then re-read that same state is not the last word only if
  storage changes later - and every later change has its own event, processed after it.
* A slow worker that writes a stale state after a faster one wrote the current state re-reads
  after its write, sees the newer state, and writes again; the keyword adapters also refuse
  an older `doc_version` of the same document outright.
* Each replace makes the path hold exactly the new chunks, so chunks beyond a shrunken
  document's count, or of an earlier document at the same path, go with it.

A SPACE_DELETE event names the space with an empty path: the worker removes every chunk of
the space from the keyword index and every vector collection, then indexes whatever the
space holds now (a write that raced the deletion), so the erasure cannot remove a later
document's chunks for good. A PURGE event is a deletion for the worker: the document reads
as gone, and its chunks go.

Within a process, work on one (space, path) is serialised; across replicas the re-read
carries correctness. Callers acknowledge an event only after `index` returned for its
document, having started after the event arrived.

Read-your-writes: after each leg (the keyword index, then the vector collections) applied a
document, the worker records in `IndexProgress` the (document id, version) that leg now
holds, and marks the document ids the events named that are no longer current as finished
(engram.domain.positions). The keyword index is written before the chunks are embedded, so
a lexical search waiting for a write never waits for embedding or the vector backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from google.protobuf.message import DecodeError
from prometheus_client import Counter, Histogram

from engram.domain.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, build_chunks
from engram.domain.chunks import Chunk
from engram.domain.documents import DocumentEvent, StoredDocument
from engram.domain.errors import EngramError, InvalidArgument, Unavailable
from engram.domain.positions import IndexLeg, applied_versions
from engram.domain.spaces import SpaceRef
from engram.indexer.models import IndexModels, ModelTarget
from engram.indexer.sources import DocumentSource
from engram.indexes.ports import IndexModelMismatch, KeywordIndex, VectorIndex, Vectors
from engram.indexes.progress import IndexProgress
from engram.runtime.keyed_locks import KeyedLocks
from engram.runtime.tracing import consumer_span
from engram.wire import decode_event

log = logging.getLogger(__name__)

# Documents at least this long are chunked on a worker thread, not on the event loop.
_CHUNK_OFF_LOOP_CHARS = 64 * 1024
# Texts per embedding call (see `_embed`).
EMBED_SLICE = 64

DOCUMENTS = Counter(
    "engram_indexer_documents_total",
    "Documents brought up to date in the indexes, by outcome (indexed, deleted, failed).",
    ("outcome",),
)
CHUNKS = Counter("engram_indexer_chunks_indexed_total", "Chunks written to the indexes.")
REPASSES = Counter(
    "engram_indexer_repasses_total",
    "Extra indexing passes because the document changed while it was being indexed.",
)
DOCUMENT_SECONDS = Histogram(
    "engram_indexer_document_seconds",
    "Time to bring one document up to date in both indexes (every pass).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LAG_SECONDS = Histogram(
    "engram_indexer_lag_seconds",
    "From a document change (its event time) to both indexes holding it.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
SPACES_ERASED = Counter(
    "engram_indexer_spaces_erased_total",
    "Spaces whose chunks were removed from both indexes (DeleteSpace).",
)
DEAD_LETTERS = Counter(
    "engram_indexer_dead_letters_total",
    "Events given up on after the maximum number of attempts (or undecodable).",
)

DocumentKey = tuple[str, str]


class Outcome(StrEnum):
    INDEXED = "indexed"
    DELETED = "deleted"
    # A backfill found no switch left to fill (another replica finished it).
    SKIPPED = "skipped"


class IndexSuperseded(Unavailable):
    """The document kept changing for every pass; a later attempt will catch up."""

    reason = "INDEX_SUPERSEDED"


class UndecodableEvent(InvalidArgument):
    reason = "UNDECODABLE_EVENT"


@dataclass(frozen=True, slots=True)
class _Written:
    """What one pass read and wrote: the state to compare against a re-read."""

    document: StoredDocument | None
    chunks: int


def read_event(payload: bytes) -> DocumentEvent:
    """The DocumentEvent of a message payload; UndecodableEvent if it is not one."""
    try:
        return decode_event(payload)
    except (DecodeError, EngramError, KeyError, ValueError) as error:
        raise UndecodableEvent(f"not a DocumentEvent: {type(error).__name__}") from None


def coalesce(events: Iterable[DocumentEvent]) -> dict[DocumentKey, list[DocumentEvent]]:
    """Events grouped by the document they name, in first-seen order: one indexing run
    answers all of a document's events."""
    groups: dict[DocumentKey, list[DocumentEvent]] = {}
    for event in events:
        groups.setdefault((event.space_id, event.path), []).append(event)
    return groups


def event_documents(events: Iterable[DocumentEvent]) -> frozenset[str]:
    """The document ids the events name (a reindex request names none)."""
    return frozenset(event.document_id for event in events if event.document_id)


def event_traces(events: Iterable[DocumentEvent]) -> list[dict[str, str]]:
    """The trace contexts the events carry (from the writes that made them)."""
    return [dict(event.trace_context) for event in events if event.trace_context]


def observe_lag(events: Sequence[DocumentEvent]) -> None:
    now = time.time()
    for event in events:
        LAG_SECONDS.observe(max(0.0, now - event.at.timestamp()))


def _cancelling() -> bool:
    """Whether the current task is being cancelled (a shutdown, not a failed document)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _same_state(before: StoredDocument | None, after: StoredDocument | None) -> bool:
    if before is None or after is None:
        return before is after
    return (before.document_id, before.version, before.sha256) == (
        after.document_id,
        after.version,
        after.sha256,
    )


class IndexWorker:
    """Brings documents up to date in the keyword index and the vector collections."""

    def __init__(
        self,
        source: DocumentSource,
        keyword: KeywordIndex,
        vector: VectorIndex,
        models: IndexModels,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        concurrency: int = 8,
        max_passes: int = 6,
        progress: IndexProgress | None = None,
    ) -> None:
        self._source = source
        self._keyword = keyword
        self._vector = vector
        self._models = models
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._concurrency = concurrency
        self._max_passes = max_passes
        self._progress = progress
        self._locks = KeyedLocks()

    @property
    def models(self) -> IndexModels:
        return self._models

    @property
    def source(self) -> DocumentSource:
        return self._source

    async def index(
        self,
        space: SpaceRef,
        path: str,
        *,
        backfill: bool = False,
        traces: Sequence[Mapping[str, str]] = (),
        named: Collection[str] = (),
    ) -> Outcome:
        """Makes both indexes hold the current chunks of (space, path), or none if it is
        deleted. With `backfill`, writes only the pending model's collection (a model switch
        filling it); the keyword index and the active collection are left to events.
        `traces` are the trace contexts of the events this run answers: its span continues
        the first one's trace and links to all. `named` are the document ids those events
        name (see the module's read-your-writes note).

        An empty `path` (a SPACE_DELETE event) erases the whole space from both indexes.

        Raises IndexSuperseded if storage changed during every pass, and the indexes' or
        the source's errors (IndexUnavailable, Unavailable) for the caller to retry.
        """
        if not path:
            return await self._erase_space(space, traces)
        started = time.perf_counter()
        attributes: dict[str, str | int] = {
            "engram.space_id": space.id,
            "engram.path": path,
            "engram.events": len(traces),
        }
        with consumer_span("engram.indexer/IndexDocument", traces, attributes) as span:
            async with self._locks.hold((space.id, path)):
                outcome: Outcome | None = None
                try:
                    outcome = await self._converge(space, path, backfill=backfill, named=named)
                finally:
                    if outcome is None and not _cancelling():
                        DOCUMENTS.labels("failed").inc()
            if span is not None:
                span.set_attribute("engram.outcome", outcome.value)
        DOCUMENT_SECONDS.observe(time.perf_counter() - started)
        DOCUMENTS.labels(outcome.value).inc()
        return outcome

    async def index_many(
        self,
        keys: Iterable[tuple[SpaceRef, str]],
        *,
        traces: Mapping[DocumentKey, Sequence[Mapping[str, str]]] | None = None,
        named: Mapping[DocumentKey, Collection[str]] | None = None,
        indexed: Callable[[DocumentKey], None] | None = None,
    ) -> dict[DocumentKey, Exception | None]:
        """Indexes several documents, `concurrency` at a time; the error of each one that
        failed (None for success), so one bad document never holds up the others. `traces`
        and `named` give each document's events' trace contexts and document ids (see
        `index`); `indexed` is told each document as soon as it is indexed (progress within
        a batch)."""
        semaphore = asyncio.Semaphore(self._concurrency)
        results: dict[DocumentKey, Exception | None] = {}

        async def one(space: SpaceRef, path: str) -> None:
            async with semaphore:
                try:
                    key = (space.id, path)
                    await self.index(
                        space,
                        path,
                        traces=(traces or {}).get(key, ()),
                        named=(named or {}).get(key, ()),
                    )
                except Exception as error:  # noqa: BLE001 - reported per document; the caller retries it
                    if not isinstance(error, EngramError):
                        log.error(
                            "indexing failed unexpectedly",
                            exc_info=error,
                            extra={"space_id": space.id, "path": path},
                        )
                    results[(space.id, path)] = error
                else:
                    results[(space.id, path)] = None
                    if indexed is not None:
                        indexed((space.id, path))

        await asyncio.gather(*(one(space, path) for space, path in keys))
        return results

    async def _erase_space(self, space: SpaceRef, traces: Sequence[Mapping[str, str]]) -> Outcome:
        attributes: dict[str, str | int] = {
            "engram.space_id": space.id,
            "engram.events": len(traces),
        }
        with consumer_span("engram.indexer/EraseSpace", traces, attributes):
            async with self._locks.hold((space.id, "")):
                if self._progress is not None:
                    # Positions of the erased documents are never reached again.
                    await self._progress.forget_space(space.id)
                await self._keyword.delete_space(space.id)
                await self._vector.delete_space(space.id)
                # Documents stored now were written after the erasure (or raced it).
                remaining = [
                    (found, path) async for found, path in self._source.documents(space.id)
                ]
            for error in (await self.index_many(remaining)).values():
                if error is not None:
                    raise error
        SPACES_ERASED.inc()
        return Outcome.DELETED

    # --- one document ------------------------------------------------------------------------

    async def _converge(
        self, space: SpaceRef, path: str, *, backfill: bool, named: Collection[str]
    ) -> Outcome:
        for attempt in range(self._max_passes):
            if attempt:
                REPASSES.inc()
            if backfill:
                pending = self._models.pending_target()
                if pending is None:
                    return Outcome.SKIPPED
                targets = [pending]
            else:
                targets = await self._models.targets()
            document = await self._source.current(space, path)
            try:
                written = await self._write(space.id, path, document, targets, backfill, named)
            except IndexModelMismatch:
                # A collection went away under us (a switch, here or in another replica,
                # dropped the old one after these targets were chosen): with fresh targets
                # this is worth another pass.
                await self._models.refresh(force=True)
                fresh = (
                    [self._models.pending_target()] if backfill else await self._models.targets()
                )
                if fresh == targets:
                    raise
                continue
            again = await self._source.current(space, path)
            if _same_state(written.document, again):
                CHUNKS.inc(written.chunks)
                return Outcome.DELETED if document is None else Outcome.INDEXED
        raise IndexSuperseded(
            f"{path!r} changed during each of {self._max_passes} indexing passes; retrying later",
            metadata={"space_id": space.id, "path": path},
        )

    async def _write(
        self,
        space_id: str,
        path: str,
        document: StoredDocument | None,
        targets: Sequence[ModelTarget],
        backfill: bool,
        named: Collection[str],
    ) -> _Written:
        """Writes the document's state to the keyword index, then (embedded) to every
        target collection, recording each leg's progress once it holds the state. A
        backfill writes only a pending collection, which no search reads yet: no record."""
        held = None if document is None else (document.document_id, document.version)
        versions = applied_versions(held, named)
        if document is None:
            await self._keyword.delete_chunks(space_id, path)
            await self._record(IndexLeg.KEYWORD, space_id, path, versions)
            await self._vector.delete_chunks(space_id, path)
            await self._record(IndexLeg.VECTOR, space_id, path, versions)
            return _Written(None, 0)
        chunks = await self._chunks(document)
        if not backfill:
            await self._keyword.replace_chunks(space_id, path, chunks)
            await self._record(IndexLeg.KEYWORD, space_id, path, versions)
        texts = [chunk.indexed_text for chunk in chunks]
        vectors = await asyncio.gather(*(_embed(target, texts) for target in targets))
        for target, matrix in zip(targets, vectors, strict=True):
            await self._vector.replace_chunks(target.model.model_id, space_id, path, chunks, matrix)
        if not backfill:
            await self._record(IndexLeg.VECTOR, space_id, path, versions)
        return _Written(document, len(chunks))

    async def _record(
        self, leg: IndexLeg, space_id: str, path: str, versions: Mapping[str, int]
    ) -> None:
        if self._progress is not None:
            await self._progress.record(leg, space_id, path, versions)

    async def _chunks(self, document: StoredDocument) -> list[Chunk]:
        def build() -> list[Chunk]:
            return build_chunks(
                space_id=document.space_id,
                tenant=document.space.tenant,
                path=document.path,
                document_id=document.document_id,
                version=document.version,
                content=document.content,
                size=self._chunk_size,
                overlap=self._chunk_overlap,
            )

        if len(document.content) >= _CHUNK_OFF_LOOP_CHARS:
            return await asyncio.to_thread(build)
        return build()


async def _embed(target: ModelTarget, texts: Sequence[str]) -> Vectors:
    """The vectors of `texts`, asked for a slice at a time: a 2 MiB document is thousands of
    chunks, and one call per slice keeps each model job short, so a shutdown or a cancelled
    run stops within a slice instead of after the whole document."""
    if not texts:
        return np.empty((0, target.model.dimension), dtype=np.float32)
    if len(texts) <= EMBED_SLICE:
        return await target.embedder.embed_documents(texts)
    parts = [
        await target.embedder.embed_documents(texts[start : start + EMBED_SLICE])
        for start in range(0, len(texts), EMBED_SLICE)
    ]
    return np.concatenate(parts, axis=0)
