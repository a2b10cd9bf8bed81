"""A search hit's relevance: the calibrated probability that it answers the query.

The fused rank score says how a chunk ranks against the other candidates of one query: the
best candidate scores near 1 whether or not anything relevant is stored. Relevance is built
from the legs' raw evidence instead, so it is comparable across queries and can say
"nothing relevant":

- `cosine`: the chunk's cosine similarity to the query (a chunk the vector leg did not
  return takes the leg's last score, an upper bound of its own);
- `bm25`: its BM25 score per query term (what the query could score grows with its number
  of terms), on a log scale; 0 when the keyword leg did not match it;
- `both`: whether both legs returned it (agreement between the legs);
- `coverage`: the share of the query's terms the chunk's text holds (a term matches a word
  starting with its first letters, a light stemming), which BM25 cannot say on a small
  space: there every term is common, so an exact match of "ERR_4021" scores little.

A logistic model per combination of legs taking part maps them to [0, 1]:
`relevance = 1 / (1 + exp(-(b0 + b_cos·cosine + b_bm25·bm25 + b_both·both + b_cov·coverage)))`.
The coefficients were fitted on the LoCoMo dev conversations (each question asked in its
own conversation's space and in another's) by `bench/fit_relevance.py`, which prints this
table; the fit, its leave-one-conversation-out check and the figures are in bench/RESULTS.md.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

# Lucene's English stop words (tantivy's and OpenSearch's `english` analyzers drop them).
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Coefficients:
    intercept: float
    cosine: float
    bm25: float
    both: float
    coverage: float = 0.0


# Fitted by bench/fit_relevance.py; keys name the legs taking part.
COEFFICIENTS: dict[str, Coefficients] = {
    "hybrid": Coefficients(intercept=-10.188, cosine=5.820, bm25=5.789, both=0.028, coverage=0.448),
    "lexical": Coefficients(intercept=-9.609, cosine=0.0, bm25=8.249, both=0.0, coverage=-0.121),
    "semantic": Coefficients(intercept=-9.391, cosine=6.891, bm25=0.0, both=0.0, coverage=6.968),
}


def _terms(query: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(query.lower()) if w not in STOP_WORDS)


def query_terms(query: str) -> int:
    """Distinct words of the query that a keyword index can match (stop words dropped)."""
    return len(_terms(query)) or 1


def _stem(term: str) -> str:
    """A term's first letters: all of a short one, else all but its last two (at least 4),
    so "rotate" matches "rotates" and "rotation", "pizza" matches "pizzas"."""
    return term if len(term) <= 4 else term[: max(4, len(term) - 2)]


def coverage(stems: frozenset[str], text: str) -> float:
    """The share of `stems` that start a word of `text`."""
    if not stems or not text:
        return 0.0
    # Sorted, the words a stem starts follow it at once: one bisection per stem instead of
    # a scan of every word (this runs for each hit a search returns).
    words = sorted(set(_WORD.findall(text.lower())))
    found = 0
    for stem in stems:
        at = bisect.bisect_left(words, stem)
        if at < len(words) and words[at].startswith(stem):
            found += 1
    return found / len(stems)


@dataclass(frozen=True, slots=True)
class LegStats:
    """What relevance needs to know of the query and the lists taking part."""

    terms: int
    stems: frozenset[str]
    keyword: bool
    vector: bool
    # The vector leg's last (lowest) cosine: a bound for a chunk it did not return.
    vector_floor: float

    @classmethod
    def of(
        cls, query: str, *, bm25: Sequence[float] | None, vector: Sequence[float] | None
    ) -> LegStats:
        return cls(
            terms=query_terms(query),
            stems=frozenset(_stem(t) for t in _terms(query)),
            keyword=bm25 is not None,
            vector=vector is not None,
            vector_floor=min(vector, default=0.0) if vector else 0.0,
        )

    def features(
        self, bm25: float | None, cosine: float | None, text: str = ""
    ) -> tuple[float, float, float, float]:
        """(cosine, bm25 per query term on a log scale, both legs, coverage) of one hit;
        `None` = the leg did not return it; `text`: the chunk's text."""
        cos = cosine if cosine is not None else (self.vector_floor if self.vector else 0.0)
        keyword = math.log1p(max(bm25, 0.0) / self.terms) if bm25 is not None else 0.0
        both = 1.0 if bm25 is not None and cosine is not None else 0.0
        return cos, keyword, both, coverage(self.stems, text)

    def relevance(self, bm25: float | None, cosine: float | None, text: str = "") -> float:
        """The calibrated probability in [0, 1] that the hit is relevant."""
        key = (
            "hybrid" if self.keyword and self.vector else "lexical" if self.keyword else "semantic"
        )
        if not (self.keyword or self.vector):
            return 0.0
        c = COEFFICIENTS[key]
        cos, keyword, both, covered = self.features(bm25, cosine, text)
        z = c.intercept + c.cosine * cos + c.bm25 * keyword + c.both * both + c.coverage * covered
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


def answers(query: str, relevances: Sequence[float], texts: Sequence[str], floor: float) -> bool:
    """Whether a search answers with its hits under `min_relevance = floor`: some hit is at
    least that likely relevant, or the hits together hold every term of the query.

    The second rule covers what calibration on large spaces cannot see: in a space of a few
    documents every term is common, so BM25 scores an exact match of "ERR_4021" low; yet a
    memory whose passages hold every word asked about must not answer "nothing stored"."""
    if not relevances:
        return False
    if floor <= 0 or max(relevances) >= floor:
        return True
    stems = frozenset(_stem(t) for t in _terms(query))
    return coverage(stems, "\n".join(texts)) == 1.0
