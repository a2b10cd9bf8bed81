"""IndexerService calls: reindexing, the index status and the index progress."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import grpc

from engram.client.base import AnySpace, ClientBase, spaces_to_proto
from engram.domain.positions import IndexLeg
from engram.v1 import indexer_pb2, indexer_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.indexer import IndexStatus


# (space_id, path, document_id): one document's progress row.
ProgressKey = tuple[str, str, str]
# The index legs, by the names engram.domain.positions.IndexLeg gives them.
_LEGS = {"keyword": indexer_pb2.INDEX_LEG_KEYWORD, "vector": indexer_pb2.INDEX_LEG_VECTOR}


def _indexer(channel: grpc.aio.Channel) -> indexer_pb2_grpc.IndexerServiceAsyncStub:
    return indexer_pb2_grpc.IndexerServiceStub(channel)


class IndexerCalls(ClientBase):
    """IndexerService."""

    async def reindex(self, spaces: Sequence[AnySpace] = (), *, all: bool = False) -> int:
        """Re-enqueues every document of `spaces` (or, with `all`, of every space: platform
        admin) for indexing; returns how many. Never retried (a repeat enqueues twice)."""
        request = indexer_pb2.ReindexRequest(spaces=spaces_to_proto(spaces), all=all)
        response = await self._call(
            "IndexerService.Reindex", self._stub(_indexer).Reindex, request, idempotent=False
        )
        return response.documents_enqueued

    async def index_status(self) -> IndexStatus:
        """The active embedding model and the index backlog."""
        response = await self._call(
            "IndexerService.GetIndexStatus",
            self._stub(_indexer).GetIndexStatus,
            indexer_pb2.GetIndexStatusRequest(),
            idempotent=True,
        )
        from engram.client.results.indexer import index_status

        return index_status(response)

    async def index_progress(
        self, leg: IndexLeg | Literal["keyword", "vector"], documents: Sequence[ProgressKey]
    ) -> dict[ProgressKey, int]:
        """The version the `leg` index holds of each (space_id, path, document_id) named (at
        most 256; one it holds nothing of is absent). Service principals only."""
        request = indexer_pb2.GetIndexProgressRequest(
            leg=_LEGS[leg],
            documents=[
                indexer_pb2.IndexProgressKey(space_id=s, path=p, document_id=d)
                for s, p, d in documents
            ],
        )
        response = await self._call(
            "IndexerService.GetIndexProgress",
            self._stub(_indexer).GetIndexProgress,
            request,
            idempotent=True,
        )
        return {(r.space_id, r.path, r.document_id): r.version for r in response.reached}
