"""Weighted reciprocal rank fusion of the BM25 and vector lists (ARCHITECTURE §4).

`score(d) = Σ w_i / (k + rank_i(d))` over the lists that found `d`, with 1-based ranks.
Fusion uses ranks, never raw scores: BM25 scores have no fixed scale and differ between
backends, cosine similarities cluster by model. The fused score is normalised by the best
attainable one, `Σ w_i / (k + 1)` over the lists taking part, so a chunk ranked first in
every list scores exactly 1.0; `min_score` applies to that normalised score. Equal fused
scores are ordered by chunk id, so the same lists always give the same order.

A list that does not take part (the mode leaves it out, or its backend failed) is `None`;
an empty list takes part and found nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engram.domain.errors import InvalidArgument

DEFAULT_RRF_K = 60.0
DEFAULT_WEIGHT = 1.0


@dataclass(frozen=True, slots=True)
class FusionParams:
    """RRF weights per list and the rank constant `k`."""

    bm25_weight: float = DEFAULT_WEIGHT
    vector_weight: float = DEFAULT_WEIGHT
    k: float = DEFAULT_RRF_K

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


@dataclass(frozen=True, slots=True)
class RankedHit:
    """One entry of a backend's list, best first: the chunk and its raw score."""

    chunk_id: str
    score: float


@dataclass(frozen=True, slots=True)
class FusedHit:
    chunk_id: str
    # Normalised to [0, 1] by the best attainable fused score.
    score: float
    # Raw scores (0 when absent from that list) and 1-based ranks (0 = absent).
    bm25_score: float
    vector_score: float
    bm25_rank: int
    vector_rank: int

    @property
    def is_hybrid_match(self) -> bool:
        """Both lists found the chunk."""
        return self.bm25_rank > 0 and self.vector_rank > 0


def best_attainable(params: FusionParams, *, bm25: bool, vector: bool) -> float:
    """The fused score of a chunk ranked first in every list taking part."""
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
) -> list[FusedHit]:
    """The `limit` best chunks of the lists taking part, by normalised fused score (ties by
    chunk id), without those scoring below `min_score`.

    A chunk listed twice in one list keeps its first (best) rank.
    """
    bm25_ranks = _ranks(bm25)
    vector_ranks = _ranks(vector)
    ceiling = best_attainable(params, bm25=bm25 is not None, vector=vector is not None)
    fused: list[tuple[float, str]] = []
    for chunk_id in bm25_ranks.keys() | vector_ranks.keys():
        # Summed in the same order as `best_attainable`, so first-everywhere is exactly 1.0.
        total = 0.0
        if chunk_id in bm25_ranks:
            total += params.bm25_weight / (params.k + bm25_ranks[chunk_id][0])
        if chunk_id in vector_ranks:
            total += params.vector_weight / (params.k + vector_ranks[chunk_id][0])
        score = min(total / ceiling, 1.0) if ceiling > 0 else 0.0
        if score >= min_score:
            fused.append((score, chunk_id))
    fused.sort(key=lambda item: (-item[0], item[1]))
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
            )
        )
    return hits


def _ranks(hits: Sequence[RankedHit] | None) -> dict[str, tuple[int, float]]:
    """chunk id -> (1-based rank, raw score), ranks counting distinct chunks in list order."""
    ranks: dict[str, tuple[int, float]] = {}
    for hit in hits or ():
        if hit.chunk_id not in ranks:
            ranks[hit.chunk_id] = (len(ranks) + 1, hit.score)
    return ranks
