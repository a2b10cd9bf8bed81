"""Weighted RRF fusion: rank arithmetic, weights, ties, normalisation, min_score."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import InvalidArgument
from engram.domain.fusion import FusionParams, RankedHit, best_attainable, fuse

pytestmark = pytest.mark.unit

DEFAULT = FusionParams()


def ranked(*chunk_ids: str, top: float = 10.0) -> list[RankedHit]:
    """A best-first list whose raw scores descend from `top`."""
    return [RankedHit(chunk_id, top - i) for i, chunk_id in enumerate(chunk_ids)]


def test_scores_follow_the_rrf_formula_on_ranks() -> None:
    hits = fuse(ranked("a", "b", "c"), ranked("c", "a"), DEFAULT, limit=10)
    ceiling = 2 / 61
    expected = {
        "a": (1 / 61 + 1 / 62) / ceiling,
        "c": (1 / 63 + 1 / 61) / ceiling,
        "b": (1 / 62) / ceiling,
    }
    assert [h.chunk_id for h in hits] == ["a", "c", "b"]
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.chunk_id])


def test_ranks_and_raw_scores_are_reported_per_list() -> None:
    bm25 = [RankedHit("a", 12.5), RankedHit("b", 7.0)]
    vector = [RankedHit("b", 0.91), RankedHit("c", 0.80)]
    by_id = {h.chunk_id: h for h in fuse(bm25, vector, DEFAULT, limit=10)}
    assert (by_id["a"].bm25_rank, by_id["a"].bm25_score) == (1, 12.5)
    assert (by_id["a"].vector_rank, by_id["a"].vector_score) == (0, 0.0)
    assert (by_id["b"].bm25_rank, by_id["b"].vector_rank) == (2, 1)
    assert (by_id["b"].bm25_score, by_id["b"].vector_score) == (7.0, 0.91)
    assert (by_id["c"].bm25_rank, by_id["c"].vector_rank, by_id["c"].vector_score) == (0, 2, 0.80)
    assert by_id["b"].is_hybrid_match
    assert not by_id["a"].is_hybrid_match and not by_id["c"].is_hybrid_match


def test_first_in_every_list_scores_exactly_one() -> None:
    for params in (DEFAULT, FusionParams(0.3, 2.7, 17.0), FusionParams(1.0, 1.0, 1e-3)):
        (top, *_) = fuse(ranked("x", "y"), ranked("x", "z"), params, limit=3)
        assert top.chunk_id == "x"
        assert top.score == 1.0


def test_a_chunk_in_one_list_only_gets_that_lists_share() -> None:
    hits = fuse(ranked("only-bm25"), ranked("only-vector"), DEFAULT, limit=5)
    assert [h.score for h in hits] == [0.5, 0.5]
    assert not any(h.is_hybrid_match for h in hits)


def test_a_list_left_out_does_not_count_in_the_normalisation() -> None:
    # Lexical-only: the BM25 list alone defines the best attainable score.
    lexical = fuse(ranked("a", "b"), None, DEFAULT, limit=5)
    assert [(h.chunk_id, h.score) for h in lexical] == [("a", 1.0), ("b", pytest.approx(61 / 62))]
    semantic = fuse(None, ranked("a", "b"), DEFAULT, limit=5)
    assert [(h.chunk_id, h.score) for h in semantic] == [("a", 1.0), ("b", pytest.approx(61 / 62))]
    assert all(h.bm25_rank == 0 for h in semantic)
    # An empty list takes part: the same chunk first in BM25 only is worth half.
    assert fuse(ranked("a"), [], DEFAULT, limit=5)[0].score == 0.5
    assert fuse(None, None, DEFAULT, limit=5) == []
    assert best_attainable(DEFAULT, bm25=True, vector=False) == 1 / 61
    assert best_attainable(DEFAULT, bm25=False, vector=False) == 0.0


def test_weights_shift_the_order() -> None:
    bm25, vector = ranked("lexical-hit"), ranked("semantic-hit")
    favour_vector = fuse(bm25, vector, FusionParams(bm25_weight=1.0, vector_weight=2.0), limit=2)
    assert [h.chunk_id for h in favour_vector] == ["semantic-hit", "lexical-hit"]
    assert favour_vector[0].score == pytest.approx(2 / 3)
    assert favour_vector[1].score == pytest.approx(1 / 3)
    favour_bm25 = fuse(bm25, vector, FusionParams(bm25_weight=3.0, vector_weight=1.0), limit=2)
    assert [h.chunk_id for h in favour_bm25] == ["lexical-hit", "semantic-hit"]
    # A zero weight still reports the list's ranks but gives it no score.
    muted = fuse(bm25, vector, FusionParams(bm25_weight=0.0), limit=2)
    assert [(h.chunk_id, h.score, h.bm25_rank) for h in muted] == [
        ("semantic-hit", 1.0, 0),
        ("lexical-hit", 0.0, 1),
    ]


def test_k_flattens_or_sharpens_the_rank_curve() -> None:
    # Rank 1 in one list vs rank 3 in both: a small k favours the single first place.
    bm25, vector = ranked("solo", "p", "both"), ranked("x", "q", "both")
    sharp = fuse(bm25, vector, FusionParams(k=0.5), limit=5)
    assert [h.chunk_id for h in sharp[:2]] == ["solo", "x"]
    flat = fuse(bm25, vector, FusionParams(k=60.0), limit=5)
    assert flat[0].chunk_id == "both"


def test_ties_are_broken_by_chunk_id_whatever_the_input_order() -> None:
    # c/a/b each ranked (1, 3) or (3, 1) or alone in the same position: equal fused scores.
    first = fuse(ranked("c", "q", "a"), ranked("a", "r", "c"), DEFAULT, limit=10)
    second = fuse(ranked("a", "q", "c"), ranked("c", "r", "a"), DEFAULT, limit=10)
    assert [h.chunk_id for h in first] == ["a", "c", "q", "r"]
    assert [h.chunk_id for h in second] == ["a", "c", "q", "r"]
    assert first[0].score == first[1].score
    assert first[2].score == first[3].score
    # Single-list ties too (same rank in different lists, one list each).
    assert [h.chunk_id for h in fuse(ranked("z"), ranked("m"), DEFAULT, limit=2)] == ["m", "z"]


def test_min_score_applies_to_the_normalised_score() -> None:
    bm25, vector = ranked("a", "b", "c"), ranked("a", "c")
    all_hits = fuse(bm25, vector, DEFAULT, limit=10)
    scores = {h.chunk_id: h.score for h in all_hits}
    assert scores["a"] == 1.0 and scores["b"] < 0.5 < scores["c"]
    kept = fuse(bm25, vector, DEFAULT, limit=10, min_score=0.5)
    assert [h.chunk_id for h in kept] == ["a", "c"]
    assert [h.chunk_id for h in fuse(bm25, vector, DEFAULT, limit=10, min_score=1.0)] == ["a"]
    # Exactly at the threshold is kept.
    exact = fuse(bm25, vector, DEFAULT, limit=10, min_score=scores["c"])
    assert [h.chunk_id for h in exact] == ["a", "c"]
    # Filtering happens before the limit: the limit counts kept results only.
    assert [h.chunk_id for h in fuse(bm25, vector, DEFAULT, limit=1, min_score=0.5)] == ["a"]


def test_limit_truncates_after_ordering() -> None:
    bm25 = ranked(*[f"b{i:02d}" for i in range(50)])
    vector = ranked(*[f"v{i:02d}" for i in range(50)])
    hits = fuse(bm25, vector, DEFAULT, limit=5)
    assert [h.chunk_id for h in hits] == ["b00", "v00", "b01", "v01", "b02"]
    assert fuse(bm25, vector, DEFAULT, limit=0) == []


def test_a_repeated_chunk_keeps_its_first_rank_and_ranks_count_distinct_chunks() -> None:
    bm25 = [RankedHit("a", 3.0), RankedHit("a", 2.0), RankedHit("b", 1.0)]
    hits = {h.chunk_id: h for h in fuse(bm25, None, DEFAULT, limit=5)}
    assert (hits["a"].bm25_rank, hits["a"].bm25_score) == (1, 3.0)
    assert hits["b"].bm25_rank == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bm25_weight": -1.0}, "bm25_weight"),
        ({"vector_weight": math.nan}, "vector_weight"),
        ({"bm25_weight": math.inf}, "bm25_weight"),
        ({"k": 0.0}, "rrf_k"),
        ({"k": -5.0}, "rrf_k"),
        ({"k": math.inf}, "rrf_k"),
    ],
)
def test_params_are_validated(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        FusionParams(**kwargs)
    assert caught.value.field == field


lists = st.lists(st.sampled_from([f"c{i}" for i in range(30)]), max_size=30)


@given(
    lists,
    lists,
    st.floats(0.0, 5.0),
    st.floats(0.1, 5.0),
    st.floats(0.01, 200.0),
    st.floats(0.0, 1.0),
)
def test_properties(
    bm25_ids: list[str],
    vector_ids: list[str],
    bm25_weight: float,
    vector_weight: float,
    k: float,
    min_score: float,
) -> None:
    params = FusionParams(bm25_weight, vector_weight, k)
    hits = fuse(ranked(*bm25_ids), ranked(*vector_ids), params, limit=100, min_score=min_score)
    ids = [h.chunk_id for h in hits]
    assert len(ids) == len(set(ids))
    assert set(ids) <= set(bm25_ids) | set(vector_ids)
    assert all(min_score <= h.score <= 1.0 for h in hits)
    keys = [(-h.score, h.chunk_id) for h in hits]
    assert keys == sorted(keys)
    if min_score == 0.0:
        assert set(ids) == set(bm25_ids) | set(vector_ids)
