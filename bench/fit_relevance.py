"""Fits the relevance model's coefficients (engram.domain.relevance) on the dev dumps.

    python bench/memory_quality.py dump locomo --work-dir W     # and scifact
    python bench/fit_relevance.py W/locomo.json W/scifact.json
    python bench/fit_relevance.py --cross-validate W/locomo.json   # leave one conversation out

Every hit of every query's top 20 is an example, in each combination of legs (hybrid with
the service's default fusion, convex; lexical alone; semantic alone): LoCoMo questions in
their own space (relevant = the chunk holds at least half of an evidence turn) and in
another conversation's space (none relevant); SciFact test queries if given (relevant = the
chunk's document is judged relevant). Each dump weighs the same in the fit. The committed
coefficients come from the LoCoMo dev dump alone (bench/RESULTS.md says why). The fit is
L2-regularised logistic regression by iteratively reweighted least squares (a handful of
coefficients, no library needed). It prints the coefficient table to paste into `COEFFICIENTS`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from memory_quality import HYBRID_DEPTH, SERVED_LIMIT

from engram.domain import fusion, relevance

RIDGE = 1e-2


def fused(query: str, legs: dict[str, Any], which: str) -> list[tuple[fusion.FusedHit, str, str]]:
    """(hit, path, content) of the top 20 as the service fuses them with these legs."""
    by_id = {r["chunk_id"]: r for r in legs["lexical"] + legs["semantic"]}
    texts = {k: r["content"] for k, r in by_id.items()}
    bm25 = [fusion.RankedHit(r["chunk_id"], r["bm25"]) for r in legs["lexical"][:HYBRID_DEPTH]]
    vec = [fusion.RankedHit(r["chunk_id"], r["cosine"]) for r in legs["semantic"][:HYBRID_DEPTH]]
    if which == "lexical":
        bm25 = [fusion.RankedHit(r["chunk_id"], r["bm25"]) for r in legs["lexical"]]
        hits = fusion.fuse(
            bm25, None, fusion.FusionParams(), limit=SERVED_LIMIT, query=query, texts=texts
        )
    elif which == "semantic":
        vec = [fusion.RankedHit(r["chunk_id"], r["cosine"]) for r in legs["semantic"]]
        hits = fusion.fuse(
            None, vec, fusion.FusionParams(), limit=SERVED_LIMIT, query=query, texts=texts
        )
    else:
        served = fusion.FusionParams(method=fusion.FusionMethod.CONVEX)
        hits = fusion.fuse(
            bm25, vec, served, limit=SERVED_LIMIT, query=query, depth=HYBRID_DEPTH, texts=texts
        )
    return [(h, by_id[h.chunk_id]["path"], by_id[h.chunk_id]["content"]) for h in hits]


def features(
    query: str, hit: fusion.FusedHit, legs: dict[str, Any], which: str, text: str
) -> list[float]:
    stats = relevance.LegStats.of(
        query,
        bm25=None if which == "semantic" else [r["bm25"] for r in legs["lexical"][:HYBRID_DEPTH]],
        vector=None
        if which == "lexical"
        else [r["cosine"] for r in legs["semantic"][:HYBRID_DEPTH]],
    )
    return list(
        stats.features(
            hit.bm25_score if hit.bm25_rank else None,
            hit.vector_score if hit.vector_rank else None,
            text,
        )
    )


def evidence_spans(doc_text: str, lines: dict[str, str], evidence: list[str]) -> list[Any]:
    spans = []
    for dia_id in evidence:
        if dia_id in lines:
            at = doc_text.find(lines[dia_id])
            spans.append((at, at + len(lines[dia_id])))
    return spans


def examples(data: dict[str, Any], which: str) -> tuple[list[list[float]], list[int]]:
    x: list[list[float]] = []
    y: list[int] = []
    if data["dataset"] == "scifact":
        judged: dict[str, set[str]] = {}
        for query_id, doc_id, grade in data["qrels"]:
            if int(grade) > 0:
                judged.setdefault(str(query_id), set()).add(str(doc_id))
        for q in data["queries"]:
            for hit, path, _text in fused(q["question"], q, which):
                x.append(features(q["question"], hit, q, which, _text))
                y.append(int(path.removesuffix(".md") in judged.get(q["id"], set())))
        return x, y
    for q in data["queries"]:
        docs = data["documents"][q["conversation"]]
        for context in ("own", "absent"):
            legs = q[context]
            for hit, path, content in fused(q["question"], legs, which):
                x.append(features(q["question"], hit, legs, which, content))
                label = 0
                if context == "own":
                    text, lines = docs[path]
                    start = text.find(content)
                    for a, b in evidence_spans(text, lines, q["evidence"]):
                        if min(b, start + len(content)) - max(a, start) >= (b - a) / 2:
                            label = 1
                y.append(label)
    return x, y


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted L2-regularised logistic regression (IRLS); returns [intercept, *coefs]."""
    design = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(design.shape[1])
    ridge = RIDGE * np.eye(design.shape[1])
    ridge[0, 0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-design @ beta))
        gradient = design.T @ (w * (y - p)) - ridge @ beta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + ridge
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def fitted(dumps: list[dict[str, Any]], which: str) -> tuple[relevance.Coefficients, str]:
    """The coefficients for one combination of legs, and a note of the examples."""
    xs, ys, ws = [], [], []
    for data in dumps:
        x, y = examples(data, which)
        xs += x
        ys += y
        ws += [1.0 / len(y)] * len(y)
    xa, ya, wa = np.array(xs), np.array(ys, dtype=float), np.array(ws) * len(ys) / len(dumps)
    columns = {"hybrid": [0, 1, 2, 3], "lexical": [1, 3], "semantic": [0, 3]}[which]
    beta = fit(xa[:, columns], ya, wa)
    names = ("cosine", "bm25", "both", "coverage")
    named = dict.fromkeys(names, 0.0)
    for column, value in zip(columns, beta[1:], strict=True):
        named[names[column]] = float(value)
    note = f"{int(ya.sum())} relevant of {len(ya)}"
    return relevance.Coefficients(intercept=float(beta[0]), **named), note


def cross_validate(data: dict[str, Any]) -> None:
    """Leave one conversation out: fit on the others, report on it (AUROC, min_relevance)."""
    import memory_quality

    conversations = sorted({q["conversation"] for q in data["queries"]})
    for held in conversations:
        train = {**data, "queries": [q for q in data["queries"] if q["conversation"] != held]}
        test = {**data, "queries": [q for q in data["queries"] if q["conversation"] == held]}
        for which in ("hybrid", "lexical", "semantic"):
            relevance.COEFFICIENTS[which] = fitted([train], which)[0]
        print(f"\n## {held} held out (coefficients fitted on the other conversations)")
        memory_quality.evaluate_locomo(test)


def main() -> None:
    if sys.argv[1] == "--cross-validate":
        cross_validate(json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")))
        return
    dumps = [json.loads(Path(p).read_text(encoding="utf-8")) for p in sys.argv[1:]]
    print("COEFFICIENTS: dict[str, Coefficients] = {")
    for which in ("hybrid", "lexical", "semantic"):
        c, note = fitted(dumps, which)
        print(
            f'    "{which}": Coefficients(intercept={c.intercept:.3f}, cosine={c.cosine:.3f}, '
            f"bm25={c.bm25:.3f}, both={c.both:.3f}, coverage={c.coverage:.3f}),  # {note}"
        )
    print("}")


if __name__ == "__main__":
    main()
