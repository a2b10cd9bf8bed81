"""SearchService calls: hybrid, lexical or semantic search over one or more spaces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

from engram.client.base import AnySpace, ClientBase, spaces_to_proto
from engram.client.mapping import position_to_proto
from engram.domain.errors import InvalidArgument
from engram.domain.positions import IndexPosition
from engram.v1 import search_pb2, search_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.search import SearchResults


def _search(channel: grpc.aio.Channel) -> search_pb2_grpc.SearchServiceAsyncStub:
    return search_pb2_grpc.SearchServiceStub(channel)


# search(mode=...): which legs answer.
SEARCH_MODES = {
    "hybrid": search_pb2.SEARCH_MODE_HYBRID,
    "lexical": search_pb2.SEARCH_MODE_LEXICAL,
    "semantic": search_pb2.SEARCH_MODE_SEMANTIC,
}
# search(fusion=...): how the two legs' lists are fused ("" = the server's default).
FUSIONS = {
    "": search_pb2.SEARCH_FUSION_UNSPECIFIED,
    "convex": search_pb2.SEARCH_FUSION_CONVEX,
    "rrf": search_pb2.SEARCH_FUSION_RRF,
}


class SearchCalls(ClientBase):
    """SearchService."""

    async def search(
        self,
        query: str,
        *,
        spaces: Sequence[AnySpace] = (),
        limit: int = 0,
        mode: str = "hybrid",
        path_prefix: str = "",
        min_score: float = 0.0,
        min_positions: Sequence[IndexPosition] = (),
        max_wait_ms: int = 0,
        bm25_weight: float = 0.0,
        vector_weight: float = 0.0,
        rrf_k: float = 0.0,
        min_relevance: float = 0.0,
        fusion: str = "",
        collapse_documents: bool = False,
    ) -> SearchResults:
        """Hybrid (or "lexical" / "semantic") search of up to 16 spaces (default: the
        client's space); `limit` 1..100 (0 = 5). `min_positions` (from write results):
        answer once the indexes hold those writes, waiting at most `max_wait_ms` (0 = the
        server's cap and this client's timeout); past it the answer is degraded. The
        weights and `rrf_k` tune the fusion (0 = the server's defaults); `fusion` is
        "convex" or "rrf" ("" = the server's default). `min_relevance`: no hits unless one
        is at least this likely relevant (0 = off); `collapse_documents` keeps each
        document's best chunk only."""
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion {fusion!r} is not convex or rrf", field="fusion")
        search_mode = SEARCH_MODES.get(mode)
        if search_mode is None:
            raise InvalidArgument(
                f"mode {mode!r} is not one of {', '.join(SEARCH_MODES)}", field="mode"
            )
        request = search_pb2.SearchRequest(
            spaces=spaces_to_proto(spaces or (self.space,)),
            query=query,
            limit=limit,
            mode=search_mode,
            path_prefix=path_prefix,
            min_score=min_score,
            min_positions=[position_to_proto(p) for p in min_positions],
            max_wait_ms=max_wait_ms,
            bm25_weight=bm25_weight,
            vector_weight=vector_weight,
            rrf_k=rrf_k,
            min_relevance=min_relevance,
            fusion=FUSIONS[fusion],
            collapse_documents=collapse_documents,
        )
        # Waiting for positions may take up to max_wait_ms beyond the usual deadline.
        timeout = self.timeout + max_wait_ms / 1000 if min_positions else None
        response = await self._call(
            "SearchService.Search",
            self._stub(_search).Search,
            request,
            idempotent=True,
            deadline=timeout,
        )
        from engram.client.results.search import search_results

        return search_results(response)
