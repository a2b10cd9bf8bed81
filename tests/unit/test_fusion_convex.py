"""The convex combination of normalised scores, and the relevance every fused hit carries."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import InvalidArgument
from engram.domain.fusion import (
    CONVEX_ALPHA,
    CONVEX_ALPHA_IDENTIFIER,
    FusionMethod,
    FusionParams,
    RankedHit,
    adaptive_alpha,
    fuse,
)
from engram.domain.relevance import LegStats, answers, coverage, query_terms

pytestmark = pytest.mark.unit

CONVEX = FusionParams(method=FusionMethod.CONVEX, alpha=0.5)


def hits(**scores: float) -> list[RankedHit]:
    return [RankedHit(chunk_id, score) for chunk_id, score in scores.items()]


def test_scores_are_the_weighted_mean_of_scores_over_each_lists_best() -> None:
    bm25 = hits(a=8.0, b=4.0)
    vector = hits(b=0.8, a=0.4)
    fused = {h.chunk_id: h.score for h in fuse(bm25, vector, CONVEX, limit=5, depth=2)}
    assert fused == pytest.approx({"a": 0.5 * 1 + 0.5 * 0.5, "b": 0.5 * 0.5 + 0.5 * 1})


def test_a_chunk_missing_from_a_cut_list_takes_its_last_score_else_zero() -> None:
    bm25 = hits(a=10.0, b=5.0)
    vector = hits(c=0.9, b=0.45)
    cut = {h.chunk_id: h.score for h in fuse(bm25, vector, CONVEX, limit=5, depth=2)}
    # Both lists were cut at 2: "a" scored at most 0.45 in vectors, "c" at most 5 in BM25.
    assert cut["a"] == pytest.approx(0.5 * 1 + 0.5 * 0.5)
    assert cut["c"] == pytest.approx(0.5 * 0.5 + 0.5 * 1)
    # A keyword list shorter than asked for holds every match: "c" matched no term.
    whole = {h.chunk_id: h.score for h in fuse(bm25, vector, CONVEX, limit=5, depth=10)}
    assert whole["c"] == pytest.approx(0.5 * 0 + 0.5 * 1)


def test_an_identifier_gets_more_keyword_weight() -> None:
    assert adaptive_alpha("ERR_4021 after the upgrade") == CONVEX_ALPHA_IDENTIFIER
    assert adaptive_alpha("deploy-2026-03-03") == CONVEX_ALPHA_IDENTIFIER
    assert adaptive_alpha("what did we decide about billing?") == CONVEX_ALPHA
    bm25 = hits(exact=10.0)
    vector = hits(near=0.9, exact=0.5)
    adaptive = FusionParams(method=FusionMethod.CONVEX, alpha=None)
    top = fuse(bm25, vector, adaptive, limit=1, depth=5, query="ERR_4021")[0]
    assert top.chunk_id == "exact"


def test_weights_scale_the_shares_and_one_list_alone_is_its_own_order() -> None:
    bm25 = hits(a=10.0, b=1.0)
    vector = hits(b=0.9, a=0.1)
    keyword_heavy = FusionParams(method=FusionMethod.CONVEX, alpha=0.5, vector_weight=0.01)
    assert fuse(bm25, vector, keyword_heavy, limit=1, depth=2)[0].chunk_id == "a"
    vector_heavy = FusionParams(method=FusionMethod.CONVEX, alpha=0.5, bm25_weight=0.01)
    assert fuse(bm25, vector, vector_heavy, limit=1, depth=2)[0].chunk_id == "b"
    alone = fuse(None, vector, CONVEX, limit=5)
    assert [h.chunk_id for h in alone] == ["b", "a"] and alone[0].score == 1.0


def test_alpha_outside_0_1_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        FusionParams(method=FusionMethod.CONVEX, alpha=1.5)


def test_relevance_rises_with_the_evidence_and_stays_in_0_1() -> None:
    stats = LegStats.of("dog name", bm25=[6.0, 1.0], vector=[0.7, 0.1])
    strong = stats.relevance(6.0, 0.7)
    weak = stats.relevance(1.0, 0.1)
    keyword_only = stats.relevance(6.0, None)
    assert 0 < weak < keyword_only < strong < 1
    # The rank score cannot say "nothing relevant": the best of weak lists still scores 1.
    bm25 = hits(x=0.5)
    vector = hits(x=0.05)
    (only,) = fuse(bm25, vector, FusionParams(), limit=5, query="dog name")
    assert only.score == 1.0 and only.relevance < 0.01


def test_query_terms_drop_stop_words_and_repeats() -> None:
    assert query_terms("what is the name of the dog and the dog's toy") == 5
    assert query_terms("the of") == 1


def test_coverage_matches_terms_by_their_first_letters() -> None:
    stems = LegStats.of("when does the staging password rotate", bm25=None, vector=[]).stems
    assert (
        coverage(stems, "The staging database password rotates every Tuesday.") == 0.6
    )  # not "when", "does"
    assert coverage(stems, "") == 0.0


_WORDS = st.text(alphabet="abcdeé_1", min_size=1, max_size=7)


@given(
    st.frozensets(_WORDS, max_size=6),
    st.lists(st.one_of(_WORDS, st.sampled_from([" ", ", ", "-", "\n", "É"])), max_size=40),
)
def test_coverage_is_the_share_of_stems_that_start_a_word(
    stems: frozenset[str], parts: list[str]
) -> None:
    text = "".join(parts)
    words = set(re.findall(r"\w+", text.lower()))
    expected = sum(any(w.startswith(s) for w in words) for s in stems) / len(stems) if stems else 0
    assert coverage(stems, text) == (expected if text else 0.0)


def test_an_answer_needs_a_likely_relevant_hit_or_every_query_term() -> None:
    texts = ["Build 812 failed with ERR_4021.", "Lunch was pizza."]
    assert answers("ERR_4021", [0.001, 0.001], texts, 0.025)  # every term is there
    assert answers("kestrel osprey", [0.001], ["kestrel theme", "the osprey plan"], 0.025)
    assert not answers("name of the user's dog", [0.001, 0.002], texts, 0.025)
    assert answers("name of the user's dog", [0.03, 0.002], texts, 0.025)
    assert answers("anything", [0.0], texts, 0.0)
    assert not answers("anything", [], [], 0.0)
