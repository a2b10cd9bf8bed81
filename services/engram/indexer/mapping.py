"""IndexerService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from collections.abc import Mapping

from engram.domain.errors import InvalidArgument
from engram.domain.positions import IndexLeg, ProgressKey
from engram.indexer.service import IndexStatus
from engram.v1 import indexer_pb2, position_pb2

LEGS = {
    indexer_pb2.INDEX_LEG_KEYWORD: IndexLeg.KEYWORD,
    indexer_pb2.INDEX_LEG_VECTOR: IndexLeg.VECTOR,
}


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


def progress_request(
    request: indexer_pb2.GetIndexProgressRequest,
) -> tuple[IndexLeg, list[ProgressKey]]:
    leg = LEGS.get(request.leg)
    if leg is None:
        raise InvalidArgument("leg must be INDEX_LEG_KEYWORD or INDEX_LEG_VECTOR", field="leg")
    keys = [(key.space_id, key.path, key.document_id) for key in request.documents]
    return leg, keys


def progress_response(reached: Mapping[ProgressKey, int]) -> indexer_pb2.GetIndexProgressResponse:
    return indexer_pb2.GetIndexProgressResponse(
        reached=[
            position_pb2.IndexPosition(
                space_id=space_id, path=path, document_id=document_id, version=version
            )
            for (space_id, path, document_id), version in reached.items()
        ]
    )
