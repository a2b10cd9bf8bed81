"""IndexerService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from engram.indexer.service import IndexStatus
from engram.v1 import indexer_pb2


def status_to_proto(status: IndexStatus) -> indexer_pb2.GetIndexStatusResponse:
    active = status.active_model
    return indexer_pb2.GetIndexStatusResponse(
        active_model=active.model_id if active else "",
        dimension=active.dimension if active else 0,
        pending_model=status.pending_model.model_id if status.pending_model else "",
        backlog=status.backlog,
        switch_documents_indexed=status.switch_documents_indexed,
        collections=status.collections,
        indexed_total=status.indexed_total,
    )
