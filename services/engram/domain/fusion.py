"""Fusion of the BM25 and vector lists (ARCHITECTURE §4), and each hit's relevance.

Two fusion functions, chosen by `FusionParams.method`:

- `rrf`, weighted reciprocal rank fusion: `score(d) = Σ w_i / (k + rank_i(d))` over the lists
  that found `d`, with 1-based ranks, normalised by the best attainable one, `Σ w_i / (k + 1)`
  over the lists taking part, so a chunk ranked first in every list scores exactly 1.0.
- `convex`, a convex combination of normalised scores (Bruch, Gai and Ingber, "An Analysis
  of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023): each list's raw scores are
  scaled by its best one with a theoretical minimum of 0 (their TM2C2), a chunk a list did
  not return taking that list's last score when the list was cut at `depth` (it scored no
  higher) and 0 when the list holds every match (a keyword list shorter than asked for), and
  `score(d) = α · bm25(d) + (1 - α) · vector(d)`. α is `FusionParams.alpha` (0.5), or, when
  None, chosen per query (`adaptive_alpha`: more keyword weight for rare identifiers); the
  lists' weights scale the two shares (α·w_bm25 against (1-α)·w_vector).

`min_score` applies to the normalised fused score. Equal fused scores are ordered by chunk
id, so the same lists always give the same order. Each hit also carries its `relevance`
(`engram.domain.relevance`), which unlike the rank score is comparable across queries.

A list that does not take part (the mode leaves it out, or its backend failed) is `None`;
an empty list takes part and found nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from engram.domain import relevance
from engram.domain.errors import InvalidArgument

DEFAULT_RRF_K = 60.0
DEFAULT_WEIGHT = 1.0


class FusionMethod(StrEnum):
    RRF = "rrf"
    CONVEX = "convex"


DEFAULT_METHOD = FusionMethod.RRF

# The convex combination's keyword weight: the default, and for a query naming a rare
# identifier (a code, a version, a snake_case or CamelCase name), which embeddings blur.
CONVEX_ALPHA = 0.5
CONVEX_ALPHA_IDENTIFIER = 0.8
_IDENTIFIER = re.compile(
    r"\b(?:[A-Za-z]*\d[\w.-]*|[a-z]+_[\w]+|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}\w*)\b"
)


@dataclass(frozen=True, slots=True)
class FusionParams:
    """The fusion function and its parameters: RRF weights per list and the rank constant
    `k`; the convex combination's keyword weight `alpha` (None = chosen per query by
    `adaptive_alpha`, which measured worse on SciFact, so not the default)."""

    bm25_weight: float = DEFAULT_WEIGHT
    vector_weight: float = DEFAULT_WEIGHT
    k: float = DEFAULT_RRF_K
    method: FusionMethod = DEFAULT_METHOD
    alpha: float | None = CONVEX_ALPHA

    def __post_init__(self) -> None:
        for name, weight in (
            ("bm25_weight", self.bm25_weight),
            ("vector_weight", self.vector_weight),
        ):
            if not math.isfinite(weight) or weight < 0:
                raise InvalidArgument(
                    f"{name} must be a finite number >= 0, got {weight!r}", field=name
                )
        if not math.isfinite(self.k) or self.k <= 0:
            raise InvalidArgument(
                f"rrf_k must be a finite number > 0, got {self.k!r}", field="rrf_k"
            )
        if self.alpha is not None and not (math.isfinite(self.alpha) and 0 <= self.alpha <= 1):
            raise InvalidArgument(
                f"alpha must be between 0 and 1, got {self.alpha!r}", field="alpha"
            )
        if not isinstance(self.method, FusionMethod):
            raise InvalidArgument(f"unknown fusion method {self.method!r}", field="fusion")


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One entry of a backend's list, best first: the chunk and its raw score."""

    chunk_id: str
    score: float


@dataclass(frozen=True, slots=True)
class FusedHit:
    chunk_id: str
    # Normalised to [0, 1] (RRF: by the best attainable fused score).
    score: float
    # Raw scores (0 when absent from that list) and 1-based ranks (0 = absent).
    bm25_score: float
    vector_score: float
    bm25_rank: int
    vector_rank: int
    # Calibrated probability that the chunk is relevant (engram.domain.relevance).
    relevance: float = 0.0

    @property
    def is_hybrid_match(self) -> bool:
        """Both lists found the chunk."""
        return self.bm25_rank > 0 and self.vector_rank > 0


def best_attainable(params: FusionParams, *, bm25: bool, vector: bool) -> float:
    """The RRF score of a chunk ranked first in every list taking part."""
    total = 0.0
    if bm25:
        total += params.bm25_weight / (params.k + 1)
    if vector:
        total += params.vector_weight / (params.k + 1)
    return total


def fuse(
    bm25: Sequence[RankedHit] | None,
    vector: Sequence[RankedHit] | None,
    params: FusionParams,
    *,
    limit: int,
    min_score: float = 0.0,
    query: str = "",
    depth: int | None = None,
    texts: Mapping[str, str] | None = None,
) -> list[FusedHit]:
    """The `limit` best chunks of the lists taking part, by normalised fused score (ties by
    chunk id), without those scoring below `min_score`.

    A chunk listed twice in one list keeps its first (best) rank. `query` (its text) sets
    the adaptive convex weight and the relevance's query-length term; `depth` is how many
    hits each list was asked for (None = unknown: a list may always have been cut);
    `texts`, each chunk's text by id, lets relevance see which query terms it holds.
    """
    bm25_ranks = _ranks(bm25)
    vector_ranks = _ranks(vector)
    if params.method is FusionMethod.CONVEX:
        scores = _convex(bm25, vector, bm25_ranks, vector_ranks, params, query, depth)
    else:
        scores = _rrf(bm25, vector, bm25_ranks, vector_ranks, params)
    fused = [(score, chunk_id) for chunk_id, score in scores.items() if score >= min_score]
    fused.sort(key=lambda item: (-item[0], item[1]))
    legs = relevance.LegStats.of(
        query,
        bm25=None if bm25 is None else [s for _, s in bm25_ranks.values()],
        vector=None if vector is None else [s for _, s in vector_ranks.values()],
    )
    hits = []
    for score, chunk_id in fused[: max(limit, 0)]:
        bm25_rank, bm25_score = bm25_ranks.get(chunk_id, (0, 0.0))
        vector_rank, vector_score = vector_ranks.get(chunk_id, (0, 0.0))
        hits.append(
            FusedHit(
                chunk_id=chunk_id,
                score=score,
                bm25_score=bm25_score,
                vector_score=vector_score,
                bm25_rank=bm25_rank,
                vector_rank=vector_rank,
                relevance=legs.relevance(
                    bm25_score if bm25_rank else None,
                    vector_score if vector_rank else None,
                    (texts or {}).get(chunk_id, ""),
                ),
            )
        )
    return hits


def _rrf(
    bm25: Sequence[RankedHit] | None,
    vector: Sequence[RankedHit] | None,
    bm25_ranks: dict[str, tuple[int, float]],
    vector_ranks: dict[str, tuple[int, float]],
    params: FusionParams,
) -> dict[str, float]:
    ceiling = best_attainable(params, bm25=bm25 is not None, vector=vector is not None)
    scores = {}
    for chunk_id in bm25_ranks.keys() | vector_ranks.keys():
        # Summed in the same order as `best_attainable`, so first-everywhere is exactly 1.0.
        total = 0.0
        if chunk_id in bm25_ranks:
            total += params.bm25_weight / (params.k + bm25_ranks[chunk_id][0])
        if chunk_id in vector_ranks:
            total += params.vector_weight / (params.k + vector_ranks[chunk_id][0])
        scores[chunk_id] = min(total / ceiling, 1.0) if ceiling > 0 else 0.0
    return scores


def _convex(
    bm25: Sequence[RankedHit] | None,
    vector: Sequence[RankedHit] | None,
    bm25_ranks: dict[str, tuple[int, float]],
    vector_ranks: dict[str, tuple[int, float]],
    params: FusionParams,
    query: str,
    depth: int | None,
) -> dict[str, float]:
    alpha = params.alpha if params.alpha is not None else adaptive_alpha(query)
    # The lists' weights scale their shares, as they do in RRF.
    keyword_share, vector_share = alpha * params.bm25_weight, (1 - alpha) * params.vector_weight
    total = keyword_share + vector_share
    alpha = keyword_share / total if total > 0 else 0.5
    if vector is None:
        alpha = 1.0
    elif bm25 is None:
        alpha = 0.0
    bm25_scaled = _scaled(bm25_ranks)
    vector_scaled = _scaled(vector_ranks)
    bm25_floor = _floor(bm25_scaled, depth)
    vector_floor = _floor(vector_scaled, depth)
    scores = {}
    for chunk_id in bm25_ranks.keys() | vector_ranks.keys():
        keyword = bm25_scaled.get(chunk_id, bm25_floor)
        semantic = vector_scaled.get(chunk_id, vector_floor)
        scores[chunk_id] = min(max(alpha * keyword + (1 - alpha) * semantic, 0.0), 1.0)
    return scores


def _floor(scaled: dict[str, float], depth: int | None) -> float:
    """What a chunk missing from a list scores in it: the list's last score if the list was
    cut (it may have scored just below), else 0 (the list holds every chunk that matched)."""
    if depth is not None and len(scaled) < depth:
        return 0.0
    return min(scaled.values(), default=0.0)


def _scaled(ranks: dict[str, tuple[int, float]]) -> dict[str, float]:
    """Raw scores over the list's best, with a theoretical minimum of 0 (TM2C2)."""
    best = max((score for _, score in ranks.values()), default=0.0)
    if best <= 0:
        return {chunk_id: 0.0 for chunk_id in ranks}
    return {chunk_id: max(score, 0.0) / best for chunk_id, (_, score) in ranks.items()}


def adaptive_alpha(query: str) -> float:
    """The keyword weight for `query`: higher when it names an identifier."""
    return CONVEX_ALPHA_IDENTIFIER if _IDENTIFIER.search(query) else CONVEX_ALPHA


def _ranks(hits: Sequence[RankedHit] | None) -> dict[str, tuple[int, float]]:
    """chunk id -> (1-based rank, raw score), ranks counting distinct chunks in list order."""
    ranks: dict[str, tuple[int, float]] = {}
    for hit in hits or ():
        if hit.chunk_id not in ranks:
            ranks[hit.chunk_id] = (len(ranks) + 1, hit.score)
    return ranks
