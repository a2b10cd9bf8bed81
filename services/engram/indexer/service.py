"""IndexerService use cases: re-enqueue documents for indexing, and report the index state.

GetIndexProgress tells a search process (a service principal) how far each index leg has
got with named documents, from the progress rows the worker records: search never reads
the indexer's store itself.

Reindexing a space is allowed to whoever may change it (role member or above in its tenant;
a platform admin for a global space; any service principal naming the tenant); reindexing
every space needs a platform admin or a service principal. The documents go through the
same durable queue as changes (the outbox in `engram dev`, JetStream in production), so a
reindex survives restarts and is spread over every worker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from engram.domain.chunks import ModelInfo
from engram.domain.documents import REINDEX_EVENT_PREFIX, DocumentEvent, EventOp
from engram.domain.errors import InvalidArgument, Misconfigured, PermissionDenied
from engram.domain.policy import PLATFORM_ADMIN_REQUIRED, SERVICE_PRINCIPAL_REQUIRED, Target
from engram.domain.ports import Authorizer
from engram.domain.positions import IndexLeg, ProgressKey, progress_keys
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.indexer.models import IndexModels
from engram.indexer.sources import DocumentSource
from engram.indexes.ports import VectorIndex
from engram.indexes.progress import ProgressReader
from engram.runtime.tracing import TraceContext, current_trace_context

log = logging.getLogger(__name__)

# Documents handed to the queue at a time.
ENQUEUE_BATCH = 500
# Spaces one Reindex call may name.
MAX_SPACES = 100


class ReindexQueue(Protocol):
    async def enqueue(self, documents: Sequence[tuple[SpaceRef, str]]) -> None:
        """Queues the documents for indexing, durably."""
        ...

    async def oldest_pending(self) -> datetime | None:
        """When the oldest change event the indexer has not finished (queued or in flight)
        was written; None when nothing is pending. A document written at or after it may
        simply not be indexed yet."""
        ...


@dataclass(frozen=True, slots=True)
class IndexStatus:
    active_model: ModelInfo | None
    pending_model: ModelInfo | None
    backlog: int
    switch_documents_indexed: int
    collections: list[str]
    # A count of events indexed that only rises while the indexer works (its rate of change
    # is the indexing rate; its value means nothing across restarts or replicas).
    indexed_total: int = 0


def reindex_event(
    space: SpaceRef, path: str, at: datetime, trace_context: TraceContext = ()
) -> DocumentEvent:
    """The event a reindex request queues for one document: it names the document only (the
    worker reads the current content anyway), and the requester's trace."""
    return DocumentEvent(
        event_id=f"{REINDEX_EVENT_PREFIX}{uuid.uuid4().hex}",
        space=space,
        path=path,
        op=EventOp.UPSERT,
        version=0,
        sha256="",
        size_bytes=0,
        at=at,
        document_id="",
        trace_context=trace_context,
    )


def reindex_events(documents: Sequence[tuple[SpaceRef, str]]) -> list[DocumentEvent]:
    at = datetime.now(UTC)
    trace_context = current_trace_context()
    return [reindex_event(space, path, at, trace_context) for space, path in documents]


class IndexerService:
    def __init__(
        self,
        authorizer: Authorizer,
        source: DocumentSource,
        queue: ReindexQueue,
        models: IndexModels,
        vector: VectorIndex,
        *,
        backlog: Callable[[], Awaitable[int]],
        switch_progress: Callable[[], int],
        indexed_total: Callable[[], Awaitable[int]] | None = None,
        progress: ProgressReader | None = None,
    ) -> None:
        self._authorizer = authorizer
        self._source = source
        self._queue = queue
        self._models = models
        self._vector = vector
        self._backlog = backlog
        self._switch_progress = switch_progress
        self._indexed_total = indexed_total
        self._progress = progress

    async def reindex(
        self, principal: Principal, spaces: Sequence[SpaceRef], *, all_spaces: bool
    ) -> int:
        """Queues every document of `spaces` (or of every space); returns how many."""
        scopes: list[str | None]
        if all_spaces:
            if spaces:
                raise InvalidArgument("set either spaces or all, not both", field="all")
            if not await self._authorizer.permits(principal, Action.REINDEX, Target.INSTANCE):
                raise PermissionDenied(
                    "reindexing every space needs a platform admin", rule=PLATFORM_ADMIN_REQUIRED
                )
            scopes = [None]
        else:
            if not spaces:
                raise InvalidArgument("name at least one space, or set all", field="spaces")
            if len(spaces) > MAX_SPACES:
                raise InvalidArgument(
                    f"at most {MAX_SPACES} spaces per call, got {len(spaces)}", field="spaces"
                )
            # Every space is authorized before anything is queued.
            granted = [
                await self._authorizer.authorize(principal, Action.WRITE, space) for space in spaces
            ]
            scopes = list(dict.fromkeys(g.space.id for g in granted))
        count = 0
        batch: list[tuple[SpaceRef, str]] = []
        for scope in scopes:
            async for document in self._source.documents(scope):
                batch.append(document)
                if len(batch) >= ENQUEUE_BATCH:
                    await self._queue.enqueue(batch)
                    count += len(batch)
                    batch = []
        if batch:
            await self._queue.enqueue(batch)
            count += len(batch)
        log.info(
            "reindex queued",
            extra={
                "principal": principal.subject,
                "spaces": "*" if all_spaces else [s for s in scopes if s],
                "documents": count,
            },
        )
        return count

    async def status(self) -> IndexStatus:
        await self._models.refresh(force=True)
        collections = [model.model_id for model in await self._vector.collections()]
        return IndexStatus(
            active_model=self._models.active,
            pending_model=self._models.pending,
            backlog=await self._backlog(),
            switch_documents_indexed=self._switch_progress() if self._models.pending else 0,
            collections=collections,
            indexed_total=await self._indexed_total() if self._indexed_total else 0,
        )

    async def index_progress(
        self, principal: Principal, leg: IndexLeg, keys: Sequence[ProgressKey]
    ) -> dict[ProgressKey, int]:
        """The version `leg` holds of each document named (absent: nothing indexed yet), for
        a search process waiting for positions. Engram's own services only: the keys name
        documents of any tenant."""
        if not await self._authorizer.permits(principal, Action.INDEX_PROGRESS, Target.INSTANCE):
            raise PermissionDenied(
                "index progress is for engram's services (search) only",
                rule=SERVICE_PRINCIPAL_REQUIRED,
            )
        wanted = progress_keys(keys)
        if self._progress is None:
            raise Misconfigured("this indexer records no index progress")
        return await self._progress.reached(leg, wanted)
