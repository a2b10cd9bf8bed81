"""What a search returns: SearchService's search and WorkspaceService's memory_search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from engram.v1 import search_pb2, workspace_pb2


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One chunk found. memory_search fills path, content, score, document_id,
    is_hybrid_match and chunk_id; SearchService fills every field."""

    path: str
    content: str
    score: float
    document_id: str
    is_hybrid_match: bool
    chunk_id: str = ""
    space_id: str = ""
    chunk_index: int = 0
    bm25_score: float = 0.0
    vector_score: float = 0.0
    # 1-based rank in each index's list (0 = not in it).
    bm25_rank: int = 0
    vector_rank: int = 0
    # Calibrated probability in [0, 1] that the hit is relevant, comparable across queries.
    relevance: float = 0.0


@dataclass(frozen=True, slots=True)
class SearchResults:
    query: str
    results: tuple[SearchHit, ...]
    result_count: int
    # One backend failed or timed out and the other answered, or an index had not
    # reached the given min_positions when the wait ended.
    degraded: bool = False
    degraded_reasons: tuple[str, ...] = ()
    # min_positions each index had not reached, and the time the search waited for them.
    keyword_positions_behind: int = 0
    vector_positions_behind: int = 0
    waited_ms: int = 0


class _AnswerState(TypedDict):
    degraded: bool
    degraded_reasons: tuple[str, ...]
    keyword_positions_behind: int
    vector_positions_behind: int
    waited_ms: int


def _answer_state(
    message: workspace_pb2.MemorySearchResponse | search_pb2.SearchResponse,
) -> _AnswerState:
    """How whole the answer is: the fields MemorySearchResponse and SearchResponse share."""
    return _AnswerState(
        degraded=message.degraded,
        degraded_reasons=tuple(message.degraded_reasons),
        keyword_positions_behind=message.keyword_positions_behind,
        vector_positions_behind=message.vector_positions_behind,
        waited_ms=message.waited_ms,
    )


def memory_search_results(message: workspace_pb2.MemorySearchResponse) -> SearchResults:
    return SearchResults(
        query=message.query,
        results=tuple(
            SearchHit(
                path=hit.path,
                content=hit.content,
                score=hit.score,
                document_id=hit.document_id,
                is_hybrid_match=hit.is_hybrid_match,
                chunk_id=hit.chunk_id,
                relevance=hit.relevance,
            )
            for hit in message.hits
        ),
        result_count=message.result_count,
        **_answer_state(message),
    )


def search_results(message: search_pb2.SearchResponse) -> SearchResults:
    return SearchResults(
        query=message.query,
        results=tuple(
            SearchHit(
                path=result.path,
                content=result.content,
                score=result.score,
                document_id=result.document_id,
                is_hybrid_match=result.is_hybrid_match,
                chunk_id=result.chunk_id,
                space_id=result.space_id,
                chunk_index=result.chunk_index,
                bm25_score=result.bm25_score,
                vector_score=result.vector_score,
                bm25_rank=result.bm25_rank,
                vector_rank=result.vector_rank,
                relevance=result.relevance,
            )
            for result in message.results
        ),
        result_count=message.result_count,
        **_answer_state(message),
    )
