"""SearchService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from engram.domain.errors import InvalidArgument
from engram.domain.fusion import DEFAULT_RRF_K, DEFAULT_WEIGHT
from engram.search.service import SearchHit, SearchMode, SearchOutcome, SearchQuery
from engram.v1 import search_pb2
from engram.wire import requested_space

MODES = {
    search_pb2.SEARCH_MODE_UNSPECIFIED: SearchMode.HYBRID,
    search_pb2.SEARCH_MODE_HYBRID: SearchMode.HYBRID,
    search_pb2.SEARCH_MODE_LEXICAL: SearchMode.LEXICAL,
    search_pb2.SEARCH_MODE_SEMANTIC: SearchMode.SEMANTIC,
}


def search_query(request: search_pb2.SearchRequest) -> SearchQuery:
    """The request as a domain query; proto zeros mean the defaults."""
    mode = MODES.get(request.mode)
    if mode is None:
        raise InvalidArgument(
            "mode must be SEARCH_MODE_HYBRID, _LEXICAL or _SEMANTIC", field="mode"
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
        path_prefix=request.path_prefix,
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
    )


def search_response(outcome: SearchOutcome) -> search_pb2.SearchResponse:
    return search_pb2.SearchResponse(
        query=outcome.query,
        results=[hit_to_proto(hit) for hit in outcome.hits],
        result_count=len(outcome.hits),
        degraded=outcome.degraded,
        degraded_reasons=outcome.degraded_reasons,
    )
