"""embedding_backfill: compares what the keyword index and the active vector collection
hold for each path of the space with the store, and re-queues (through the indexer's
durable queue) every document an index is missing, holds at another version, or holds
chunks of without vectors - and every path the indexes hold that the store no longer has,
so the indexer removes its chunks. The indexer does the embedding, as for any change.

A document written at or after the oldest change event the indexer has not finished (less
`CLOCK_SKEW`), or in the last `IN_TRANSIT`, is late, not missing: its own event will index
it, so it is left alone and counted as pending. Unless that event is older than
`max_indexing_lag`: then the indexer is stopped or stuck, and those documents are re-queued
too."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

from engram.domain.hygiene import StoredState, reindex_reason
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob

# Documents handed to the reindex queue at a time.
ENQUEUE_BATCH = 500
# Margin between the clocks that stamp documents and events (other processes, on MongoDB).
CLOCK_SKEW = timedelta(seconds=1)
# A document written within this long (at most `max_indexing_lag`) is late whatever the
# queue holds: its event may still sit in storage's outbox, which the queue does not count.
IN_TRANSIT = timedelta(seconds=30)


class EmbeddingBackfillJob(HygieneJob):
    name: ClassVar[str] = "embedding_backfill"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        deps = self._deps
        model = await deps.vector.active_model()
        keyword = await deps.keyword.indexed_documents(space.id)
        vector = await deps.vector.indexed_documents(space.id) if model is not None else {}
        details = Details()
        queued: list[str] = []
        checked = pending = 0
        late_from, why = await self._late_from()
        if late_from is None:
            details.add(why)

        def check(path: str, stored: StoredState | None) -> None:
            reason = reindex_reason(
                stored, keyword.get(path), vector.get(path), vectors_expected=model is not None
            )
            if reason is not None:
                queued.append(path)
                details.add(f"{path}: {reason}")

        requeued = 0
        async for document in deps.storage.documents(space):
            checked += 1
            if late_from is not None and document.updated_at >= late_from:
                # Its change event is still queued: the indexer will get to it.
                pending += 1
                keyword.pop(document.path, None)
                vector.pop(document.path, None)
                continue
            check(
                document.path,
                StoredState(document.document_id, document.version, bool(document.content.strip())),
            )
            keyword.pop(document.path, None)
            vector.pop(document.path, None)
            if len(queued) >= ENQUEUE_BATCH:
                requeued += await self._enqueue(space, queued)
        # What is left in the indexes has no document in the store.
        for path in sorted(keyword.keys() | vector.keys()):
            check(path, None)
        requeued += await self._enqueue(space, queued)
        if pending:
            details.add(f"{pending} documents left alone: written after {why}")
        return JobReport(
            counts={
                "documents_checked": checked,
                "documents_requeued": requeued,
                "documents_pending": pending,
            },
            message=(
                f"{requeued} documents re-queued for indexing"
                + (f" (model {model.model_id})" if model is not None else " (no active model)")
                + (f", {pending} still queued for the indexer" if pending else "")
            ),
            details=details.lines(),
        )

    async def _late_from(self) -> tuple[datetime | None, str]:
        """The update time from which a document is late rather than missing (None: none
        is), and what the report says about it."""
        now = self._deps.clock()
        # Written this recently, a document's event may still be on its way to the queue
        # (the outbox relay hands events over within a second, longer while it retries).
        recent = now - min(IN_TRANSIT, self._deps.max_indexing_lag)
        oldest = await self._deps.reindex.oldest_pending()
        if oldest is None:
            return recent, f"{recent} (its change event may not have reached the indexer yet)"
        lag = now - oldest
        if lag > self._deps.max_indexing_lag:
            return None, (
                f"the indexer has had a change pending for {lag.total_seconds():.0f} s (more"
                f" than {self._deps.max_indexing_lag.total_seconds():.0f} s): it is stopped or"
                " stuck, so documents written since are re-queued too"
            )
        late_from = min(oldest - CLOCK_SKEW, recent)
        return late_from, f"the oldest change the indexer has pending ({oldest})"

    async def _enqueue(self, space: SpaceRef, paths: list[str]) -> int:
        count = len(paths)
        if paths:
            await self._deps.reindex.enqueue([(space, path) for path in paths])
            paths.clear()
        return count
