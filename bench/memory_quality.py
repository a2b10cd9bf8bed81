"""Retrieval quality for an agent's memory: SciFact and LoCoMo through the service, then every
fusion and the relevance score evaluated offline on the dumped leg lists.

    python bench/memory_quality.py dump locomo  --work-dir W       # engram dev, ~2 minutes
    python bench/memory_quality.py dump scifact --work-dir W       # ~10-30 minutes (embedding)
    python bench/memory_quality.py evaluate W/locomo.json W/scifact.json

`dump` starts `engram dev` on `W/<dataset>/engram` (kept: a second run with `--reuse` writes
nothing and embeds nothing), writes the corpus through StorageService, waits for the indexer,
then asks every query through SearchService three times: lexical (limit 100: the BM25 leg),
semantic (limit 100: the vector leg) and hybrid as served (limit 20, the service's
defaults, with each result's `relevance`). The lists go to `W/<dataset>.json`.

`evaluate` fuses the dumped legs with each fusion function of `engram.domain.fusion` (the
service's own code, so offline and served agree; hybrid uses the top 50 of each leg as the
service's candidate depth does) and reports:

- SciFact: nDCG@10 (ir-measures; a document ranks at its best chunk).
- LoCoMo: the hit within the first 2,000 characters of the results pasted in rank order (an
  evidence turn counts when at least half of its line lies in that text), hit@5, hit@10,
  per category 1-4; the found-versus-absent AUROC (each conversation's questions asked in
  the next conversation's space are the absent queries; own-space questions whose evidence
  is within the budget are the found ones) of the top result's relevance and, for
  comparison, of its fused score; and how many absent queries the default `min_relevance`
  empties, and what it costs the hit rate.

LoCoMo documents: one per session, `daily/<date>.md`, a header with the session's date and
time, then one `Speaker: text` line per turn (a shared photo's caption in brackets).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from quality import process, wait_until_indexed, write_corpus

from engram.client import AsyncClient, SearchHit, Space

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
if not DATASETS.exists():
    DATASETS = Path("/work/shared/datasets")
BUDGET_CHARS = 2000
HYBRID_DEPTH = 50
SERVED_LIMIT = 20
# Each search's deadline (the client's retries on UNAVAILABLE stay on: nothing is timed).
SEARCH_TIMEOUT = 60.0


# --- the datasets ---------------------------------------------------------------------------


def space(name: str) -> Space:
    return Space(visibility="private", name=name)


def locomo_documents(conversation: dict[str, Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """path -> (Markdown, dia_id -> its line) for each session of one conversation."""
    documents: dict[str, tuple[str, dict[str, str]]] = {}
    n = 1
    while f"session_{n}" in conversation:
        when = conversation[f"session_{n}_date_time"]
        stamp = datetime.strptime(when, "%I:%M %p on %d %B, %Y")
        path = f"daily/{stamp:%Y-%m-%d}.md"
        if path in documents:
            path = f"daily/{stamp:%Y-%m-%d}-{n}.md"
        lines: dict[str, str] = {}
        for turn in conversation[f"session_{n}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            lines[turn["dia_id"]] = f"{turn['speaker']}: {text}"
        header = f"# {stamp:%A %d %B %Y}, {stamp:%H:%M} (session {n})\n\n"
        documents[path] = (header + "\n".join(lines.values()) + "\n", lines)
        n += 1
    return documents


def load_locomo(root: Path) -> dict[str, Any]:
    conversations = {}
    for file in sorted(root.glob("*.json")):
        conversation = json.loads(file.read_text(encoding="utf-8"))
        docs = locomo_documents(conversation)
        questions = [
            {
                "question": q["question"],
                "category": q["category"],
                "evidence": [e.strip() for ev in q["evidence"] for e in re.split(r"[;,]", ev)],
            }
            for q in conversation["qa"]
            if q["category"] in (1, 2, 3, 4)
        ]
        conversations[f"locomo-{file.stem}"] = {"documents": docs, "questions": questions}
    return conversations


# --- dumping the legs -----------------------------------------------------------------------


def result_dict(result: SearchHit) -> dict[str, Any]:
    return {
        "chunk_id": result.chunk_id,
        "path": result.path,
        "content": result.content,
        "score": result.score,
        "bm25": result.bm25_score,
        "cosine": result.vector_score,
        "relevance": result.relevance,
    }


async def ask(
    client: AsyncClient, spaces: str, text: str, mode: str, limit: int
) -> list[dict[str, Any]]:
    response = await client.search(text, spaces=[space(spaces)], limit=limit, mode=mode)
    if response.degraded:
        print(f"  warning: degraded answer: {list(response.degraded_reasons)}")
    return [result_dict(r) for r in response.results]


async def legs(client: AsyncClient, space_name: str, text: str) -> dict[str, Any]:
    return {
        "lexical": await ask(client, space_name, text, "lexical", 100),
        "semantic": await ask(client, space_name, text, "semantic", 100),
        "hybrid": await ask(client, space_name, text, "hybrid", SERVED_LIMIT),
    }


async def dump(args: argparse.Namespace) -> None:
    work = args.work_dir / args.dataset
    work.mkdir(parents=True, exist_ok=True)
    port = int(os.environ.get("BENCH_PORT", "0")) or __import__("benchlib").free_port()
    env = {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_DATA_DIR": str(work / "engram"),
    }
    command = [sys.executable, "-m", "engram", "dev", "--port", str(port)]
    out: dict[str, Any] = {"dataset": args.dataset, "queries": []}
    async with contextlib.AsyncExitStack() as stack:
        if args.addr:
            addr = args.addr
        else:
            addr = await stack.enter_async_context(
                process(command, env, work / "engram-dev.log", port)
            )
        async with AsyncClient(addr, timeout=SEARCH_TIMEOUT) as client:
            if args.dataset == "locomo":
                await dump_locomo(args, client, out)
            else:
                await dump_scifact(args, client, out)
    target = args.work_dir / f"{args.dataset}.json"
    target.write_text(json.dumps(out), encoding="utf-8")
    print(f"{len(out['queries'])} queries -> {target}")


async def dump_locomo(args: argparse.Namespace, client: AsyncClient, out: Any) -> None:
    conversations = load_locomo(args.locomo)
    if not args.reuse:
        for name, conversation in conversations.items():
            docs = {path: text for path, (text, _) in conversation["documents"].items()}
            await write_into(client, name, docs)
        print(f"indexed {await wait_until_indexed(client):.0f} s after the last write")
    names = list(conversations)
    out["documents"] = {
        name: {p: [t, lines] for p, (t, lines) in c["documents"].items()}
        for name, c in conversations.items()
    }
    for i, name in enumerate(names):
        other = names[(i + 1) % len(names)]
        for q in conversations[name]["questions"]:
            own = await legs(client, name, q["question"])
            absent = await legs(client, other, q["question"])
            out["queries"].append({**q, "conversation": name, "own": own, "absent": absent})


async def write_into(client: AsyncClient, name: str, documents: dict[str, str]) -> None:
    corpus = {p.removesuffix(".md"): t for p, t in documents.items()}
    await write_corpus(client, corpus, space=space(name))


async def dump_scifact(args: argparse.Namespace, client: AsyncClient, out: Any) -> None:
    from quality import load_dataset

    documents, queries, qrels = load_dataset(args.scifact, "test")
    if args.addr:
        # A corpus still being indexed: judge only what is indexed (a random sub-corpus).
        indexed = set()
        for doc_id in {q.doc_id for q in qrels}:
            response = await client.search(
                documents[doc_id][:200],
                spaces=[space("quality")],
                limit=1,
                mode="lexical",
                path_prefix=f"{doc_id}.md",
            )
            if response.results:
                indexed.add(doc_id)
        qrels = [q for q in qrels if q.doc_id in indexed]
        judged = {q.query_id for q in qrels}
        queries = {k: v for k, v in queries.items() if k in judged}
        print(f"sub-corpus: {len(indexed)} judged documents indexed, {len(queries)} queries")
    elif not args.reuse:
        await write_into(client, "quality", {f"{k}.md": v for k, v in documents.items()})
        print(f"indexed {await wait_until_indexed(client):.0f} s after the last write")
    out["qrels"] = [[q.query_id, q.doc_id, q.relevance] for q in qrels]
    for query_id, text in queries.items():
        out["queries"].append(
            {"id": query_id, "question": text, **await legs(client, "quality", text)}
        )


# --- evaluating -----------------------------------------------------------------------------


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counting half (Mann-Whitney)."""
    if not positives or not negatives:
        return float("nan")
    ranked = sorted([(s, 1) for s in positives] + [(s, 0) for s in negatives])
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        average = (i + j + 1) / 2
        rank_sum += average * sum(1 for k in range(i, j) if ranked[k][1])
        i = j
    n_pos, n_neg = len(positives), len(negatives)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def turn_hits(
    results: Sequence[dict[str, Any]], documents: dict[str, Any], evidence: Sequence[str]
) -> dict[str, bool]:
    """Whether an evidence turn lies within the budget, the first 5 and the first 10 results."""
    spans: dict[str, tuple[str, int, int]] = {}
    for path, (text, lines) in documents.items():
        for dia_id, line in lines.items():
            if dia_id in evidence:
                at = text.find(line)
                spans[dia_id] = (path, at, at + len(line))
    covered: list[tuple[int, str, int, int]] = []  # (rank, path, start, end)
    budget = BUDGET_CHARS
    budget_covered: list[tuple[str, int, int]] = []
    for rank, result in enumerate(results):
        text = documents[result["path"]][0]
        start = text.find(result["content"])
        if start < 0:
            continue
        covered.append((rank, result["path"], start, start + len(result["content"])))
        if budget > 0:
            take = min(budget, len(result["content"]))
            budget_covered.append((result["path"], start, start + take))
            budget -= take + 2  # the blank line between pasted results

    def found(cover: Sequence[tuple[str, int, int]]) -> bool:
        for path, a, b in spans.values():
            need = (b - a) / 2
            got = sum(max(0, min(b, e) - max(a, s)) for p, s, e in cover if p == path)
            if got >= need:
                return True
        return False

    return {
        "budget": found(budget_covered),
        "hit@5": found([c[1:] for c in covered if c[0] < 5]),
        "hit@10": found([c[1:] for c in covered if c[0] < 10]),
    }


def ndcg10(run: dict[str, dict[str, float]], qrels: list[list[Any]]) -> float:
    import ir_measures
    from ir_measures import nDCG

    judged = [ir_measures.Qrel(str(q), str(d), int(r)) for q, d, r in qrels]
    return float(ir_measures.calc_aggregate([nDCG @ 10], judged, run)[nDCG @ 10])


def doc_run(ranked: Sequence[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for result in ranked:
        doc = result["path"].removesuffix(".md")
        if doc not in out:
            out[doc] = float(1000 - len(out))
    return out


Fusion = Callable[[str, list[dict[str, Any]], list[dict[str, Any]]], list[dict[str, Any]]]


def fusions() -> dict[str, Fusion]:
    """Each fusion compared: name -> (query, lexical list, semantic list) -> fused list."""
    from engram.domain import fusion as f

    def run(method: str, **kw: Any) -> Fusion:
        def fuse(query: str, lex: list[dict[str, Any]], sem: list[dict[str, Any]]) -> Any:
            by_id = {r["chunk_id"]: r for r in lex + sem}
            bm25 = [f.RankedHit(r["chunk_id"], r["bm25"]) for r in lex[:HYBRID_DEPTH]]
            vec = [f.RankedHit(r["chunk_id"], r["cosine"]) for r in sem[:HYBRID_DEPTH]]
            params = f.FusionParams(method=f.FusionMethod(method), **kw)
            texts = {k: r["content"] for k, r in by_id.items()}
            hits = f.fuse(
                bm25, vec, params, limit=SERVED_LIMIT, query=query, depth=HYBRID_DEPTH, texts=texts
            )
            return [{**by_id[h.chunk_id], "fused": h} for h in hits]

        return fuse

    variants: dict[str, Fusion] = {
        "rrf k=60": run("rrf"),
        "convex a=0.5": run("convex", alpha=0.5),
        "convex a=0.6": run("convex", alpha=0.6),
        "convex a=0.7": run("convex", alpha=0.7),
        "convex adaptive": run("convex", alpha=None),
    }
    return variants


def single_legs() -> Callable[[str, Any, Any], list[dict[str, Any]]]:
    """One leg alone, as the lexical or semantic mode serves it (with its relevance)."""
    from engram.domain import fusion as f

    def fuse(query: str, lex: list[dict[str, Any]] | None, sem: list[dict[str, Any]] | None) -> Any:
        by_id = {r["chunk_id"]: r for r in (lex or []) + (sem or [])}
        bm25 = None if lex is None else [f.RankedHit(r["chunk_id"], r["bm25"]) for r in lex]
        vec = None if sem is None else [f.RankedHit(r["chunk_id"], r["cosine"]) for r in sem]
        texts = {k: r["content"] for k, r in by_id.items()}
        hits = f.fuse(bm25, vec, f.FusionParams(), limit=SERVED_LIMIT, query=query, texts=texts)
        return [{**by_id[h.chunk_id], "fused": h} for h in hits]

    return fuse


def evaluate(args: argparse.Namespace) -> None:
    for path in args.dumps:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data["dataset"] == "scifact":
            evaluate_scifact(data)
        else:
            evaluate_locomo(data)


def evaluate_scifact(data: dict[str, Any]) -> None:
    print(f"\n### SciFact (test, {len(data['queries'])} queries): nDCG@10\n")
    print("| mode / fusion | nDCG@10 |\n|---|---|")
    for mode in ("lexical", "semantic", "hybrid"):
        run = {q["id"]: doc_run(q[mode]) for q in data["queries"]}
        label = "hybrid (as served, limit 20)" if mode == "hybrid" else mode
        print(f"| {label} | {ndcg10(run, data['qrels']):.3f} |")
    for name, fuse in fusions().items():
        run = {
            q["id"]: doc_run(fuse(q["question"], q["lexical"], q["semantic"]))
            for q in data["queries"]
        }
        print(f"| hybrid, {name} | {ndcg10(run, data['qrels']):.3f} |")


def locomo_lists(data: dict[str, Any]) -> dict[str, Callable[[dict[str, Any]], list[Any]]]:
    single = single_legs()
    lists: dict[str, Callable[[dict[str, Any]], list[Any]]] = {
        "lexical": lambda legs: single(legs["question"], legs["lexical"], None),
        "semantic": lambda legs: single(legs["question"], None, legs["semantic"]),
        "hybrid (served)": lambda legs: legs["hybrid"],
    }
    for name, fuse in fusions().items():
        lists[f"hybrid, {name}"] = lambda legs, fuse=fuse: fuse(
            legs["question"], legs["lexical"], legs["semantic"]
        )
    return lists


def evaluate_locomo(data: dict[str, Any]) -> None:
    queries = data["queries"]
    print(f"\n### LoCoMo dev ({len(queries)} questions, categories 1-4)\n")
    print(
        "| mode / fusion | within 2,000 chars | hit@5 | hit@10 | cat 1 | cat 2 | cat 3 | cat 4 "
        "| AUROC relevance | AUROC top score |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, pick in locomo_lists(data).items():
        rows = []
        found_rel, absent_rel, found_top, absent_top = [], [], [], []
        for q in queries:
            docs = data["documents"][q["conversation"]]
            own = pick({**q["own"], "question": q["question"]})
            absent = pick({**q["absent"], "question": q["question"]})
            hits = turn_hits(own, docs, q["evidence"])
            rows.append((q["category"], hits))
            if hits["budget"]:
                found_rel.append(top_relevance(own))
                found_top.append(top_score(own))
            absent_rel.append(top_relevance(absent))
            absent_top.append(top_score(absent))

        def rate(key: str, category: int | None = None, rows: list[Any] = rows) -> float:
            chosen = [h[key] for c, h in rows if category in (None, c)]
            return sum(chosen) / len(chosen) if chosen else float("nan")

        cats = " | ".join(f"{rate('budget', c):.3f}" for c in (1, 2, 3, 4))
        print(
            f"| {name} | {rate('budget'):.3f} | {rate('hit@5'):.3f} | {rate('hit@10'):.3f} "
            f"| {cats} | {auroc(found_rel, absent_rel):.3f} | {auroc(found_top, absent_top):.3f} |"
        )
    lists = locomo_lists(data)
    evaluate_floor(data, "hybrid, convex a=0.5 (the default)", lists["hybrid, convex a=0.5"])


THRESHOLDS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.1)


def evaluate_floor(
    data: dict[str, Any], name: str, pick: Callable[[dict[str, Any]], list[Any]]
) -> None:
    """What each min_relevance does to `pick`'s lists: absent queries emptied, hit rate."""
    from engram.domain.workspace import DEFAULT_MIN_RELEVANCE

    print(f"\n{name}: min_relevance against absent queries emptied and the hit rate\n")
    print("| min_relevance | absent emptied | within 2,000 chars | change | hit@5 |")
    print("|---|---|---|---|---|")
    own_lists, absent_lists = [], []
    for q in data["queries"]:
        own_lists.append((q, pick({**q["own"], "question": q["question"]})))
        absent_lists.append(pick({**q["absent"], "question": q["question"]}))

    def rel(r: dict[str, Any]) -> float:
        fused = r.get("fused")
        return float(fused.relevance if fused is not None else r["relevance"])

    from engram.domain.relevance import answers

    def kept(results: list[dict[str, Any]], t: float, query: str) -> list[dict[str, Any]]:
        # As the service applies min_relevance (engram.domain.relevance.answers).
        texts = [r["content"] for r in results]
        return results if answers(query, [rel(r) for r in results], texts, t) else []

    base = None
    for t in sorted({0.0, *THRESHOLDS, DEFAULT_MIN_RELEVANCE}):
        emptied = sum(
            1
            for a, (q, _) in zip(absent_lists, own_lists, strict=True)
            if not kept(a, t, q["question"])
        )
        hits = [
            turn_hits(
                kept(own, t, q["question"]), data["documents"][q["conversation"]], q["evidence"]
            )
            for q, own in own_lists
        ]
        rate = sum(h["budget"] for h in hits) / len(hits)
        at5 = sum(h["hit@5"] for h in hits) / len(hits)
        base = rate if base is None else base
        mark = " (default)" if t == DEFAULT_MIN_RELEVANCE else ""
        print(
            f"| {t:g}{mark} | {emptied / len(absent_lists):.3f} | {rate:.3f} | {rate - base:+.3f} "
            f"| {at5:.3f} |"
        )


def top_score(results: Sequence[dict[str, Any]]) -> float:
    if not results:
        return 0.0
    fused = results[0].get("fused")
    return float(fused.score if fused is not None else results[0]["score"])


def top_relevance(results: Sequence[dict[str, Any]]) -> float:
    if not results:
        return 0.0
    first = results[0]
    fused = first.get("fused")
    return float(fused.relevance if fused is not None else first["relevance"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("dataset", choices=("locomo", "scifact"))
    d.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "engram-mq")
    d.add_argument("--reuse", action="store_true", help="the corpus is stored already")
    d.add_argument("--addr", help="a running `engram dev` holding the corpus (implies --reuse)")
    d.add_argument("--locomo", type=Path, default=DATASETS / "locomo-dev")
    d.add_argument("--scifact", type=Path, default=DATASETS / "scifact")
    e = sub.add_parser("evaluate")
    e.add_argument("dumps", nargs="+")
    args = parser.parse_args()
    if args.command == "dump":
        asyncio.run(dump(args))
    else:
        evaluate(args)


if __name__ == "__main__":
    main()
