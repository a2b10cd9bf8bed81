"""embedding_backfill: compares what the keyword index and the active vector collection
hold for each path of the space with the store, and re-queues (through the indexer's
durable queue) every document an index is missing, holds at another version, or holds
chunks of without vectors - and every path the indexes hold that the store no longer has,
so the indexer removes its chunks. The indexer does the embedding, as for any change."""

from __future__ import annotations

from typing import ClassVar

from engram.domain.hygiene import StoredState, reindex_reason
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.spaces import SpaceRef
from engram.maintenance.hygiene.common import Details, HygieneJob, documents

# Documents handed to the reindex queue at a time.
ENQUEUE_BATCH = 500


class EmbeddingBackfillJob(HygieneJob):
    name: ClassVar[str] = "embedding_backfill"

    async def run(self, space: SpaceRef, settings: SpaceSettings) -> JobReport:
        deps = self._deps
        model = await deps.vector.active_model()
        keyword = await deps.keyword.indexed_documents(space.id)
        vector = await deps.vector.indexed_documents(space.id) if model is not None else {}
        details = Details()
        queued: list[str] = []
        checked = 0

        def check(path: str, stored: StoredState | None) -> None:
            reason = reindex_reason(
                stored, keyword.get(path), vector.get(path), vectors_expected=model is not None
            )
            if reason is not None:
                queued.append(path)
                details.add(f"{path}: {reason}")

        requeued = 0
        async for document in documents(deps.repository, space.id):
            checked += 1
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
        return JobReport(
            counts={"documents_checked": checked, "documents_requeued": requeued},
            message=(
                f"{requeued} documents re-queued for indexing"
                + (f" (model {model.model_id})" if model is not None else " (no active model)")
            ),
            details=details.lines(),
        )

    async def _enqueue(self, space: SpaceRef, paths: list[str]) -> int:
        count = len(paths)
        if paths:
            await self._deps.reindex.enqueue([(space, path) for path in paths])
            paths.clear()
        return count
