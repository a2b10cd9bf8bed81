"""Fusion variants against the default, per LoCoMo conversation (issue 32).

    python bench/memory_quality.py dump locomo --work-dir W
    python bench/fusion_search.py W/locomo.json

Ranks every question's own-space legs (the dumped lexical and semantic lists, top 50 of each
as the service's candidate depth) with variants of the fusion and prints, per conversation,
the hit within the first 2,000 characters of the results pasted in rank order (the headline
of `memory_quality.py`), and each variant's change against the default, the service's own
`engram.domain.fusion` (convex, alpha = 0.5). A variant worth adopting wins on every
conversation, not on their average: one conversation holds 81 questions, so one question
moves its figure by 0.012.

The variants: the keyword weight alpha; how each list is normalised (by its best score, the
default, TM2C2; min-max; mean +- 3 standard deviations; a cosine floor other than 0; BM25 on
a square-root or log scale); what a chunk missing from a list scores there; other ways of
combining (geometric and harmonic means, CombMNZ); a boost for the share of query terms a
chunk holds or for its relevance; alpha from the keyword leg's confidence; and a recency
prior on the session's date (its path, `daily/<date>.md`), with a half-life in days.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from memory_quality import HYBRID_DEPTH, SERVED_LIMIT, turn_hits

from engram.domain import fusion, relevance

Scores = dict[str, float]
Normaliser = Callable[[list[tuple[str, float]]], Scores]
Ranker = Callable[[str, list[dict[str, Any]], list[dict[str, Any]]], list[dict[str, Any]]]


def by_best(items: list[tuple[str, float]]) -> Scores:
    """Scores over the list's best, theoretical minimum 0 (TM2C2, the service's default)."""
    best = max((s for _, s in items), default=0.0)
    return {c: max(s, 0.0) / best if best > 0 else 0.0 for c, s in items}


def min_max(items: list[tuple[str, float]]) -> Scores:
    if not items:
        return {}
    hi, lo = max(s for _, s in items), min(s for _, s in items)
    return {c: (s - lo) / (hi - lo) if hi > lo else 1.0 for c, s in items}


def three_sigma(items: list[tuple[str, float]]) -> Scores:
    """Distribution-based: mean - 3 sd maps to 0, mean + 3 sd to 1."""
    if len(items) < 2:
        return {c: 1.0 for c, _ in items}
    values = [s for _, s in items]
    mean, sd = statistics.mean(values), statistics.pstdev(values) or 1.0
    return {c: (s - mean + 3 * sd) / (6 * sd) for c, s in items}


def floored(floor: float) -> Normaliser:
    """By the best score with a theoretical minimum of `floor` (a cosine unrelated text reaches)."""

    def normalise(items: list[tuple[str, float]]) -> Scores:
        best = max((s for _, s in items), default=0.0)
        span = best - floor
        return {c: max(s - floor, 0.0) / span if span > 0 else 0.0 for c, s in items}

    return normalise


def transformed(f: Callable[[float], float]) -> Normaliser:
    return lambda items: by_best([(c, f(max(s, 0.0))) for c, s in items])


def session_date(path: str) -> date:
    return date.fromisoformat(path.removeprefix("daily/")[:10])


def variant(
    alpha: float = 0.5,
    keyword_norm: Normaliser = by_best,
    vector_norm: Normaliser = by_best,
    combine: str = "convex",
    missing: float = 1.0,
    coverage: float = 0.0,
    relevance_boost: float = 0.0,
    adaptive: bool = False,
    recency: tuple[float, float] | None = None,
    newest: dict[str, date] | None = None,
) -> Callable[[str], Ranker]:
    """A ranker per conversation (the recency prior needs its newest session's date).

    `missing` scales what a chunk absent from a cut list scores there (1 = the list's last
    score, the default; 0 = nothing); `recency` = (weight, half-life in days)."""

    def for_conversation(conversation: str) -> Ranker:
        def rank(
            query: str, lex: list[dict[str, Any]], sem: list[dict[str, Any]]
        ) -> list[dict[str, Any]]:
            by_id = {r["chunk_id"]: r for r in lex + sem}
            keyword_items = [(r["chunk_id"], r["bm25"]) for r in lex[:HYBRID_DEPTH]]
            vector_items = [(r["chunk_id"], r["cosine"]) for r in sem[:HYBRID_DEPTH]]
            k, v = keyword_norm(keyword_items), vector_norm(vector_items)
            k_floor = missing * min(k.values(), default=0.0) if len(k) >= HYBRID_DEPTH else 0.0
            v_floor = missing * min(v.values(), default=0.0) if len(v) >= HYBRID_DEPTH else 0.0
            a = alpha
            if adaptive and keyword_items:
                best = max(s for _, s in keyword_items) / relevance.query_terms(query)
                a = min(max(alpha + 0.3 * (math.log1p(best) - 1.0), 0.2), 0.8)
            stems = frozenset(relevance._stem(t) for t in relevance._terms(query))
            legs = relevance.LegStats.of(
                query,
                bm25=[s for _, s in keyword_items],
                vector=[s for _, s in vector_items],
            )
            raw_k, raw_v = dict(keyword_items), dict(vector_items)
            scores = {}
            for c in k.keys() | v.keys():
                ks, vs = k.get(c, k_floor), v.get(c, v_floor)
                if combine == "geometric":
                    s = ks**a * vs ** (1 - a) if ks > 0 and vs > 0 else 0.0
                elif combine == "harmonic":
                    s = 1 / (a / max(ks, 1e-9) + (1 - a) / max(vs, 1e-9))
                else:
                    s = a * ks + (1 - a) * vs
                    if combine == "mnz" and c in k and c in v:
                        s *= 1.1
                text = by_id[c]["content"]
                s += coverage * relevance.coverage(stems, text)
                if relevance_boost:
                    s += relevance_boost * legs.relevance(raw_k.get(c), raw_v.get(c), text)
                if recency is not None and newest is not None:
                    weight, half_life = recency
                    age = (newest[conversation] - session_date(by_id[c]["path"])).days
                    s += weight * 0.5 ** (age / half_life)
                scores[c] = s
            order = sorted(scores, key=lambda c: (-scores[c], c))[:SERVED_LIMIT]
            return [by_id[c] for c in order]

        return rank

    return for_conversation


def service_default(_: str) -> Ranker:
    def rank(query: str, lex: list[dict[str, Any]], sem: list[dict[str, Any]]) -> Any:
        by_id = {r["chunk_id"]: r for r in lex + sem}
        hits = fusion.fuse(
            [fusion.RankedHit(r["chunk_id"], r["bm25"]) for r in lex[:HYBRID_DEPTH]],
            [fusion.RankedHit(r["chunk_id"], r["cosine"]) for r in sem[:HYBRID_DEPTH]],
            fusion.FusionParams(method=fusion.FusionMethod.CONVEX),
            limit=SERVED_LIMIT,
            query=query,
            depth=HYBRID_DEPTH,
        )
        return [by_id[h.chunk_id] for h in hits]

    return rank


def variants(newest: dict[str, date]) -> dict[str, Callable[[str], Ranker]]:
    def one_leg(which: str) -> Callable[[str], Ranker]:
        return lambda _: lambda q, lex, sem: (lex if which == "lexical" else sem)[:SERVED_LIMIT]

    out: dict[str, Callable[[str], Ranker]] = {
        "lexical": one_leg("lexical"),
        "semantic": one_leg("semantic"),
        "default (convex a=0.5, by best)": service_default,
    }
    for a in (0.3, 0.4, 0.45, 0.55, 0.6):
        out[f"alpha {a}"] = variant(alpha=a)
    for a in (0.5, 0.6):
        out[f"min-max, alpha {a}"] = variant(a, min_max, min_max)
        out[f"mean +- 3 sd, alpha {a}"] = variant(a, three_sigma, three_sigma)
    for floor in (0.1, 0.2):
        for a in (0.5, 0.6):
            out[f"cosine floor {floor}, alpha {a}"] = variant(a, vector_norm=floored(floor))
    for name, f in (("sqrt", math.sqrt), ("log1p", math.log1p)):
        out[f"BM25 {name}, alpha 0.6"] = variant(0.6, keyword_norm=transformed(f))
    out["missing = 0"] = variant(missing=0.0)
    out["missing = half the last score"] = variant(missing=0.5)
    out["geometric mean"] = variant(combine="geometric")
    out["harmonic mean"] = variant(combine="harmonic")
    out["CombMNZ x1.1"] = variant(combine="mnz")
    out["+ 0.1 x query-term coverage"] = variant(coverage=0.1)
    out["+ 0.1 x relevance"] = variant(relevance_boost=0.1)
    out["alpha from keyword confidence"] = variant(adaptive=True)
    for weight in (0.05, 0.1):
        for half_life in (30.0, 90.0):
            out[f"recency +{weight}, half-life {half_life:g} d"] = variant(
                recency=(weight, half_life), newest=newest
            )
    return out


def main() -> None:
    data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    conversations = sorted(data["documents"])
    newest = {c: max(session_date(p) for p in data["documents"][c]) for c in conversations}
    rows: dict[str, dict[str, float]] = {}
    for name, make in variants(newest).items():
        hits: dict[str, list[bool]] = {c: [] for c in conversations}
        rankers = {c: make(c) for c in conversations}
        for q in data["queries"]:
            c = q["conversation"]
            ranked = rankers[c](q["question"], q["own"]["lexical"], q["own"]["semantic"])
            hits[c].append(turn_hits(ranked, data["documents"][c], q["evidence"])["budget"])
        every = [h for c in conversations for h in hits[c]]
        rows[name] = {"all": sum(every) / len(every)}
        rows[name].update({c: sum(hits[c]) / len(hits[c]) for c in conversations})
    default = rows["default (convex a=0.5, by best)"]
    lexical = rows["lexical"]
    print(f"\n### Fusion variants, LoCoMo dev ({len(data['queries'])} questions)\n")
    print(
        "| variant | all | "
        + " | ".join(conversations)
        + " | change vs default (per conversation) | over lexical |"
    )
    print("|---|" + "---|" * (len(conversations) + 3))
    for name, row in rows.items():
        per = " | ".join(f"{row[c]:.3f}" for c in conversations)
        change = " / ".join(f"{row[c] - default[c]:+.3f}" for c in conversations)
        over = row["all"] - lexical["all"]
        print(f"| {name} | {row['all']:.3f} | {per} | {change} | {over:+.3f} |")


if __name__ == "__main__":
    main()
