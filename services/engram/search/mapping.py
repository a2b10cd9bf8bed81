"""SearchService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from engram.domain.errors import InvalidArgument
from engram.domain.fusion import DEFAULT_RRF_K, DEFAULT_WEIGHT, FusionMethod
from engram.search.service import SearchHit, SearchMode, SearchOutcome, SearchQuery
from engram.v1 import search_pb2
from engram.wire import position_from_proto, requested_space

MODES = {
    search_pb2.SEARCH_MODE_UNSPECIFIED: SearchMode.HYBRID,
    search_pb2.SEARCH_MODE_HYBRID: SearchMode.HYBRID,
    search_pb2.SEARCH_MODE_LEXICAL: SearchMode.LEXICAL,
    search_pb2.SEARCH_MODE_SEMANTIC: SearchMode.SEMANTIC,
}
FUSIONS = {
    search_pb2.SEARCH_FUSION_UNSPECIFIED: None,
    search_pb2.SEARCH_FUSION_RRF: FusionMethod.RRF,
    search_pb2.SEARCH_FUSION_CONVEX: FusionMethod.CONVEX,
}


def wait_seconds(max_wait_ms: int) -> float | None:
    """A request's max_wait_ms as the domain's cap: 0 = none; negative stays negative so
    validation refuses it."""
    return None if max_wait_ms == 0 else max_wait_ms / 1000


def search_query(
    request: search_pb2.SearchRequest, *, deadline_seconds: float | None = None
) -> SearchQuery:
    """The request as a domain query; proto zeros mean the defaults. `deadline_seconds`:
    the time left before the call's deadline."""
    mode = MODES.get(request.mode)
    if mode is None:
        raise InvalidArgument(
            "mode must be SEARCH_MODE_HYBRID, _LEXICAL or _SEMANTIC", field="mode"
        )
    if request.fusion not in FUSIONS:
        raise InvalidArgument(
            "fusion must be SEARCH_FUSION_RRF or SEARCH_FUSION_CONVEX (or unspecified)",
            field="fusion",
        )
    return SearchQuery(
        spaces=[
            requested_space(space, field=f"spaces[{index}]")
            for index, space in enumerate(request.spaces)
        ],
        text=request.query,
        limit=request.limit,
        mode=mode,
        bm25_weight=request.bm25_weight or DEFAULT_WEIGHT,
        vector_weight=request.vector_weight or DEFAULT_WEIGHT,
        rrf_k=request.rrf_k or DEFAULT_RRF_K,
        min_score=request.min_score,
        min_relevance=request.min_relevance,
        fusion=FUSIONS[request.fusion],
        collapse_documents=request.collapse_documents,
        path_prefix=request.path_prefix,
        min_positions=[position_from_proto(p) for p in request.min_positions],
        max_wait_seconds=wait_seconds(request.max_wait_ms),
        deadline_seconds=deadline_seconds,
    )


def hit_to_proto(hit: SearchHit) -> search_pb2.SearchResult:
    chunk = hit.chunk
    return search_pb2.SearchResult(
        chunk_id=chunk.chunk_id,
        document_id=chunk.document_id,
        space_id=chunk.space_id,
        path=chunk.path,
        content=chunk.content,
        chunk_index=chunk.chunk_index,
        score=hit.score,
        bm25_score=hit.bm25_score,
        vector_score=hit.vector_score,
        bm25_rank=hit.bm25_rank,
        vector_rank=hit.vector_rank,
        is_hybrid_match=hit.is_hybrid_match,
        relevance=hit.relevance,
    )


def search_response(outcome: SearchOutcome) -> search_pb2.SearchResponse:
    return search_pb2.SearchResponse(
        query=outcome.query,
        results=[hit_to_proto(hit) for hit in outcome.hits],
        result_count=len(outcome.hits),
        degraded=outcome.degraded,
        degraded_reasons=outcome.degraded_reasons,
        keyword_positions_behind=outcome.keyword_positions_behind,
        vector_positions_behind=outcome.vector_positions_behind,
        waited_ms=round(outcome.waited_seconds * 1000),
    )
