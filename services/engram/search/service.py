"""The search use case (ARCHITECTURE §3-§4): authorize, query both indexes in parallel, fuse.

1. Every requested space is authorized (stamping tenant and user from the identity); one
   refusal refuses the whole request, naming the first refused space.
2. The request is validated.
3. The keyword leg (BM25) and the semantic leg (embed the query with the active vector
   model's embedder, then vector search) run concurrently, each filtered to the authorized
   space ids inside its backend and each under its own deadline.
4. The lists are fused (`engram.domain.fusion`: a convex combination of normalised scores
   by default, or weighted RRF), each hit getting its calibrated relevance
   (`engram.domain.relevance`); hits below `min_score` or `min_relevance` are dropped, and
   with `collapse_documents` only each document's best chunk is kept. A leg that failed or
   overran is left out and the answer is marked degraded; if no leg answered the request
   fails with UNAVAILABLE.

Read-your-writes: a query carrying `min_positions` (what writes answered) makes each leg
first wait until its index has reached them (engram.indexes.progress), within one wait
budget: the request deadline less the backend timeout, the query's `max_wait_seconds` and
the server's `max_wait_seconds`, whichever is shortest. A leg still behind when the budget
is spent searches anyway and the answer is degraded, the reason naming that index and how
many positions it lacked. Each leg waits for its own index only: a lexical search never
waits for the vector index.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import Counter, Histogram

from engram.domain.chunks import Chunk, ModelInfo, ScoredChunk
from engram.domain.errors import EngramError, InvalidArgument, InvalidSpaceRef, PermissionDenied
from engram.domain.fusion import (
    DEFAULT_RRF_K,
    DEFAULT_WEIGHT,
    FusedHit,
    FusionMethod,
    FusionParams,
    RankedHit,
    fuse,
)
from engram.domain.ports import Authorizer
from engram.domain.positions import IndexLeg, IndexPosition, merge_positions
from engram.domain.principals import Action, Principal
from engram.domain.relevance import answers
from engram.domain.spaces import SpaceRef
from engram.indexes.ports import (
    IndexModelMismatch,
    IndexUnavailable,
    KeywordIndex,
    VectorIndex,
)
from engram.indexes.progress import ProgressReader, wait_for_positions
from engram.search.errors import SearchUnavailable
from engram.search.ports import QueryEmbedders
from engram.search.query_cache import QueryEmbeddingCache

log = logging.getLogger(__name__)

MAX_SPACES = 16
DEFAULT_LIMIT = 5
MAX_LIMIT = 100
MAX_QUERY_CHARS = 4096
MAX_PATH_PREFIX_BYTES = 1024
# How long the active vector model is trusted before asking the index again; a search
# names the model explicitly, so during a switch it keeps using one model end to end.
ACTIVE_MODEL_SECONDS = 2.0

KEYWORD = "keyword"
VECTOR = "vector"

DEGRADED = Counter(
    "engram_search_degraded_total",
    "Searches answered without one index, by the index left out and why.",
    ("backend", "cause"),
)
BACKEND_SECONDS = Histogram(
    "engram_search_backend_seconds",
    "Time of each search leg (vector: query embedding + vector search), by backend.",
    ("backend",),
    buckets=(0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.5, 1, 2.5),
)
WAIT_SECONDS = Histogram(
    "engram_search_position_wait_seconds",
    "Time a search waited for an index to reach the positions it was given, by index.",
    ("backend",),
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
BEHIND = Counter(
    "engram_search_positions_behind_total",
    "Searches answered before an index reached their positions (wait budget spent).",
    ("backend",),
)
FOREIGN_HITS = Counter(
    "engram_search_foreign_hits_total",
    "Hits an index returned from a space the request did not authorize (dropped; a bug).",
    ("backend",),
)


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    SEMANTIC = "semantic"


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Server-side knobs (`ENGRAM_SEARCH_*`)."""

    candidate_depth: int = 50
    backend_timeout_seconds: float = 1.0
    # The longest a search waits for its min_positions.
    max_wait_seconds: float = 10.0
    # Hybrid fusion when the request names none (measured in bench/RESULTS.md).
    fusion: FusionMethod = FusionMethod.CONVEX


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A search as requested, before authorization and validation."""

    spaces: Sequence[SpaceRef]
    text: str
    limit: int = 0
    mode: SearchMode = SearchMode.HYBRID
    bm25_weight: float = DEFAULT_WEIGHT
    vector_weight: float = DEFAULT_WEIGHT
    rrf_k: float = DEFAULT_RRF_K
    min_score: float = 0.0
    # An answer none of whose hits is at least this likely relevant is empty (0 = off).
    min_relevance: float = 0.0
    # None = the service's default fusion (SearchOptions.fusion).
    fusion: FusionMethod | None = None
    # At most one hit (its best chunk) per document.
    collapse_documents: bool = False
    path_prefix: str = ""
    # Answer once the indexes hold these writes (or the wait budget is spent).
    min_positions: Sequence[IndexPosition] = ()
    # The caller's cap on that wait; None = no cap of its own.
    max_wait_seconds: float | None = None
    # Seconds left before the request's deadline; None = no deadline.
    deadline_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    chunk: Chunk
    score: float
    bm25_score: float
    vector_score: float
    bm25_rank: int
    vector_rank: int
    is_hybrid_match: bool
    # Calibrated probability in [0, 1] that the chunk is relevant (comparable across queries).
    relevance: float = 0.0


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    query: str
    hits: list[SearchHit]
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    # min_positions each index had not reached when it was searched.
    keyword_positions_behind: int = 0
    vector_positions_behind: int = 0
    # Time spent waiting for min_positions.
    waited_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class _Leg:
    """One backend's answer: its hits, or None and why it has none."""

    backend: str
    hits: list[ScoredChunk] | None
    reason: str = ""
    # Positions its index had not reached, and why (empty when none were behind).
    behind: int = 0
    behind_reason: str = ""
    waited: float = 0.0


class SearchService:
    def __init__(
        self,
        keyword: KeywordIndex,
        vector: VectorIndex,
        embedders: QueryEmbedders,
        authorizer: Authorizer,
        *,
        options: SearchOptions | None = None,
        query_cache: QueryEmbeddingCache | None = None,
        progress: ProgressReader | None = None,
    ) -> None:
        self._keyword = keyword
        self._vector = vector
        self._embedders = embedders
        self._authorizer = authorizer
        self._options = options or SearchOptions()
        self._query_cache = query_cache or QueryEmbeddingCache(1024)
        self._active: tuple[ModelInfo, float] | None = None
        self._progress = progress

    async def search(self, principal: Principal, query: SearchQuery) -> SearchOutcome:
        space_ids = await self._authorize(principal, query.spaces)
        limit, params = _validate(query, self._options.fusion)
        positions = merge_positions(query.min_positions, space_ids)
        budget = self._wait_budget(query)
        # Fusion needs a deeper candidate list from each leg; a single leg's fused order is
        # its own rank order, so its first `limit` hits are the answer. Asking it for 50
        # when 10 are returned cost the keyword leg 40 stored-document reads (the tail of
        # lexical search at 1M chunks, bench/scale_bench.py).
        depth = (
            max(self._options.candidate_depth, limit) if query.mode is SearchMode.HYBRID else limit
        )
        legs = self._legs(query, space_ids, positions, budget, depth)
        answered = {leg.backend: leg for leg in await asyncio.gather(*legs)}
        reasons = [leg.reason for leg in answered.values() if leg.hits is None]
        if len(reasons) == len(answered):
            raise SearchUnavailable(
                "search is unavailable: " + "; ".join(reasons),
                metadata={"backends": ",".join(answered)},
            )
        allowed = set(space_ids)
        keyword_hits = _inside(answered.get(KEYWORD), allowed)
        vector_hits = _inside(answered.get(VECTOR), allowed)
        chunks = _chunks_by_id(keyword_hits, vector_hits)
        fused = _kept(
            fuse(
                _ranked(keyword_hits),
                _ranked(vector_hits),
                params,
                # Collapsing drops hits, so it chooses among all the candidates.
                limit=len(chunks) if query.collapse_documents else limit,
                min_score=query.min_score,
                query=query.text,
                depth=depth,
                texts=_texts(chunks),
            ),
            chunks,
            query,
            limit,
        )
        hits = [
            SearchHit(
                chunk=chunks[hit.chunk_id],
                score=hit.score,
                bm25_score=hit.bm25_score,
                vector_score=hit.vector_score,
                bm25_rank=hit.bm25_rank,
                vector_rank=hit.vector_rank,
                is_hybrid_match=hit.is_hybrid_match,
                relevance=hit.relevance,
            )
            for hit in fused
        ]
        behind = [leg.behind_reason for leg in answered.values() if leg.behind]
        return SearchOutcome(
            query=query.text,
            hits=hits,
            degraded=bool(reasons or behind),
            degraded_reasons=behind + reasons,
            keyword_positions_behind=_behind(answered.get(KEYWORD)),
            vector_positions_behind=_behind(answered.get(VECTOR)),
            waited_seconds=max(leg.waited for leg in answered.values()),
        )

    def _legs(
        self,
        query: SearchQuery,
        space_ids: list[str],
        positions: Sequence[IndexPosition],
        budget: float,
        depth: int,
    ) -> list[Awaitable[_Leg]]:
        """The query's legs, each answering once its index is caught up (or the wait ends)."""
        legs: list[Awaitable[_Leg]] = []
        # The semantic leg starts first: embedding the query is the long pole, and once
        # the model runs (without the GIL) the BM25 leg overlaps it almost for free.
        if query.mode is not SearchMode.LEXICAL:
            legs.append(
                self._caught_up_leg(
                    VECTOR,
                    IndexLeg.VECTOR,
                    positions,
                    budget,
                    lambda: self._semantic(space_ids, query.text, depth, query.path_prefix),
                )
            )
        if query.mode is not SearchMode.SEMANTIC:
            legs.append(
                self._caught_up_leg(
                    KEYWORD,
                    IndexLeg.KEYWORD,
                    positions,
                    budget,
                    lambda: self._keyword.search(
                        space_ids, query.text, limit=depth, path_prefix=query.path_prefix
                    ),
                )
            )
        return legs

    # --- steps -------------------------------------------------------------------------------

    async def _authorize(self, principal: Principal, requested: Sequence[SpaceRef]) -> list[str]:
        """The stamped space ids, in request order without repeats; refuses the request at
        the first space the principal may not search."""
        # Each distinct space with the position it first has in the request.
        positions: dict[SpaceRef, int] = {}
        for position, space in enumerate(requested):
            positions.setdefault(space, position)
        spaces = list(positions)
        if not spaces:
            raise InvalidArgument("name at least one space to search", field="spaces")
        if len(spaces) > MAX_SPACES:
            raise InvalidArgument(
                f"at most {MAX_SPACES} spaces per search, got {len(spaces)}", field="spaces"
            )
        decisions = await asyncio.gather(
            *(self._authorizer.authorize(principal, Action.SEARCH, space) for space in spaces),
            return_exceptions=True,
        )
        space_ids: dict[str, None] = {}
        for space, decision in zip(spaces, decisions, strict=True):
            index = positions[space]
            if isinstance(decision, PermissionDenied):
                refused = PermissionDenied(
                    f"you may not search {space.describe()} (spaces[{index}]): {decision.message}",
                    rule=decision.rule,
                )
                refused.metadata["space_index"] = str(index)
                raise refused from None
            if isinstance(decision, InvalidSpaceRef):
                raise InvalidSpaceRef(
                    f"spaces[{index}]: {decision.message}",
                    field=decision.field.replace("space", f"spaces[{index}]", 1),
                ) from None
            if isinstance(decision, BaseException):
                raise decision
            space_ids[decision.space.id] = None
        return list(space_ids)

    def _wait_budget(self, query: SearchQuery) -> float:
        """Seconds the legs may wait for the query's positions (see the module doc)."""
        budget = self._options.max_wait_seconds
        if query.max_wait_seconds is not None:
            budget = min(budget, query.max_wait_seconds)
        if query.deadline_seconds is not None:
            budget = min(budget, query.deadline_seconds - self._options.backend_timeout_seconds)
        return max(0.0, budget)

    async def _caught_up_leg(
        self,
        backend: str,
        leg: IndexLeg,
        positions: Sequence[IndexPosition],
        budget: float,
        work: Callable[[], Awaitable[list[ScoredChunk]]],
    ) -> _Leg:
        """The leg's answer once its index has reached `positions` (or the budget is
        spent: then it answers with what the index holds, and says how far behind it is)."""
        if not positions:
            return await self._leg(backend, work())
        started = time.perf_counter()
        why = ""
        if self._progress is None:
            pending: Sequence[IndexPosition] = positions
            why = "this search service cannot see the indexer's progress"
        else:
            try:
                pending = await wait_for_positions(self._progress, leg, positions, budget)
            except EngramError as error:
                pending = positions
                why = f"index progress unreadable: {error.message}"
        waited = time.perf_counter() - started
        WAIT_SECONDS.labels(backend).observe(waited)
        answer = await self._leg(backend, work())
        if not pending:
            return dataclasses.replace(answer, waited=waited)
        BEHIND.labels(backend).inc()
        reason = (
            f"{backend} index behind: {len(pending)} of {len(positions)} positions not "
            f"reached after {waited * 1000:.0f} ms"
        )
        return dataclasses.replace(
            answer,
            behind=len(pending),
            behind_reason=f"{reason} ({why})" if why else reason,
            waited=waited,
        )

    async def _leg(self, backend: str, work: Awaitable[list[ScoredChunk]]) -> _Leg:
        """Runs one backend call under its deadline; a failure becomes a reason, not an error."""
        timeout = self._options.backend_timeout_seconds
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                hits = await work
        except TimeoutError:
            DEGRADED.labels(backend, "timeout").inc()
            log.warning("search leg timed out", extra={"backend": backend, "timeout": timeout})
            return _Leg(backend, None, f"{backend} index: no answer within {timeout:g}s")
        except EngramError as error:
            DEGRADED.labels(backend, "error").inc()
            log.warning(
                "search leg failed",
                extra={"backend": backend, "reason": error.reason, "error": error.message},
            )
            return _Leg(backend, None, f"{backend} index: {error.message}")
        finally:
            BACKEND_SECONDS.labels(backend).observe(time.perf_counter() - started)
        return _Leg(backend, hits)

    async def _semantic(
        self, space_ids: list[str], text: str, depth: int, path_prefix: str
    ) -> list[ScoredChunk]:
        model = await self._active_model()
        if model is None:
            # Nothing has been embedded yet: an empty list, not a failure.
            return []
        try:
            return await self._semantic_on(model, space_ids, text, depth, path_prefix)
        except IndexModelMismatch:
            # The model was switched and the old collection dropped since this search read
            # the alias (a slow query outlives the switch's drop grace): once more on the
            # model the alias names now.
            self._active = None
            current = await self._active_model()
            if current is None or current == model:
                raise
            return await self._semantic_on(current, space_ids, text, depth, path_prefix)

    async def _semantic_on(
        self, model: ModelInfo, space_ids: list[str], text: str, depth: int, path_prefix: str
    ) -> list[ScoredChunk]:
        embedder = self._embedders.for_model(model)
        if embedder is None:
            raise IndexUnavailable(
                f"this process has no embedder for the active vector model {model.model_id!r}"
            )
        vector = await self._query_cache.embed(embedder, model.model_id, text)
        return await self._vector.search(
            space_ids, vector, limit=depth, path_prefix=path_prefix, model_id=model.model_id
        )

    async def _active_model(self) -> ModelInfo | None:
        now = time.monotonic()
        if self._active is not None and now - self._active[1] < ACTIVE_MODEL_SECONDS:
            return self._active[0]
        model = await self._vector.active_model()
        self._active = None if model is None else (model, now)
        return model


def _texts(chunks: dict[str, Chunk]) -> dict[str, str]:
    """What relevance reads of each chunk: the text a result returns (its calibration saw
    exactly that)."""
    return {chunk_id: chunk.content for chunk_id, chunk in chunks.items()}


def _kept(
    fused: list[FusedHit], chunks: dict[str, Chunk], query: SearchQuery, limit: int
) -> list[FusedHit]:
    """The first `limit` hits (one per document when collapsing); none at all when no hit
    reaches `min_relevance` and together they do not hold every query term
    (`engram.domain.relevance.answers`).

    The floor gates the answer rather than each hit: a question whose answer is stored has
    one likely-relevant hit and the context ranked around it (the passages before and after
    an answer are often what an agent needs, and score lower on their own); a question
    about something never stored has none. Measured in bench/RESULTS.md (issue 32)."""
    kept: list[FusedHit] = []
    documents: set[str] = set()
    for hit in fused:
        if query.collapse_documents:
            document = chunks[hit.chunk_id].document_id
            if document in documents:
                continue
            documents.add(document)
        kept.append(hit)
        if len(kept) == limit:
            break
    texts = [chunks[hit.chunk_id].content for hit in kept]
    if not answers(query.text, [hit.relevance for hit in kept], texts, query.min_relevance):
        return []
    return kept


def _validate(query: SearchQuery, default_fusion: FusionMethod) -> tuple[int, FusionParams]:
    """The effective limit and fusion parameters; InvalidArgument naming the field."""
    text = query.text
    if not text.strip():
        raise InvalidArgument("query must not be empty or whitespace", field="query")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidArgument(
            f"query is {len(text)} characters; at most {MAX_QUERY_CHARS} are allowed",
            field="query",
        )
    limit = query.limit or DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(
            f"limit must be between 1 and {MAX_LIMIT} (0 = {DEFAULT_LIMIT}), got {query.limit}",
            field="limit",
        )
    if not math.isfinite(query.min_score) or not 0.0 <= query.min_score <= 1.0:
        raise InvalidArgument(
            f"min_score must be between 0 and 1, got {query.min_score!r}", field="min_score"
        )
    if not math.isfinite(query.min_relevance) or not 0.0 <= query.min_relevance <= 1.0:
        raise InvalidArgument(
            f"min_relevance must be between 0 and 1, got {query.min_relevance!r}",
            field="min_relevance",
        )
    if len(query.path_prefix.encode("utf-8")) > MAX_PATH_PREFIX_BYTES:
        raise InvalidArgument(
            f"path_prefix is over {MAX_PATH_PREFIX_BYTES} bytes", field="path_prefix"
        )
    if query.max_wait_seconds is not None and not (
        math.isfinite(query.max_wait_seconds) and query.max_wait_seconds >= 0
    ):
        raise InvalidArgument("max_wait_ms must not be negative", field="max_wait_ms")
    if not isinstance(query.mode, SearchMode):
        raise InvalidArgument("mode must be hybrid, lexical or semantic", field="mode")
    params = FusionParams(
        bm25_weight=query.bm25_weight,
        vector_weight=query.vector_weight,
        k=query.rrf_k,
        method=query.fusion or default_fusion,
    )
    return limit, params


def _behind(leg: _Leg | None) -> int:
    return 0 if leg is None else leg.behind


def _inside(leg: _Leg | None, allowed: set[str]) -> list[ScoredChunk] | None:
    """The leg's hits (None when it did not answer). The index filtered them to `allowed`
    already; this only guards against an adapter bug ever leaking another space's chunk."""
    if leg is None or leg.hits is None:
        return None
    hits = leg.hits
    if all(hit.chunk.space_id in allowed for hit in hits):
        return hits
    FOREIGN_HITS.labels(leg.backend).inc()
    log.error("an index returned chunks of unrequested spaces", extra={"backend": leg.backend})
    return [hit for hit in hits if hit.chunk.space_id in allowed]


def _ranked(hits: list[ScoredChunk] | None) -> list[RankedHit] | None:
    if hits is None:
        return None
    return [RankedHit(hit.chunk.chunk_id, hit.score) for hit in hits]


def _chunks_by_id(*lists: list[ScoredChunk] | None) -> dict[str, Chunk]:
    """Each chunk once; when the indexes hold different versions (an update being indexed),
    the newer one."""
    chunks: dict[str, Chunk] = {}
    for hits in lists:
        for hit in hits or ():
            known = chunks.get(hit.chunk.chunk_id)
            if known is None or hit.chunk.doc_version > known.doc_version:
                chunks[hit.chunk.chunk_id] = hit.chunk
    return chunks
