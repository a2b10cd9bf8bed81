"""Retrieval quality through the whole service: nDCG@10 and Recall@100 on a BEIR dataset.

    python bench/quality.py                       # `engram dev` (tantivy + embedded vectors)
    python bench/quality.py --target real         # NATS + FerretDB + OpenSearch (deploy/local),
                                                  # engram serve storage / indexer / search
    python bench/quality.py --addr HOST:PORT [--search-addr H:P] [--indexer-addr H:P] \\
        [--token T]                               # a deployment already running

Each corpus entry becomes one document, `# <title>\\n\\n<text>`, at `<doc id>.md` in one
space, written through StorageService over gRPC; the indexer chunks and embeds it as it
would any memory. Once the index backlog is empty, every test query goes through
SearchService (limit 100) in each mode; chunks map back to their document, whose rank is
its best chunk's. Scores come from ir-measures (trec_eval definitions). Fusion uses the
service defaults (k = 60, weights 1/1): nothing is tuned for the dataset.

The real target runs the production processes. No Qdrant server can be had on this machine,
so the indexer writes the embedded vector index (ENGRAM_VECTOR_DIR) and the search server is
the production composition (`search_on_backends`) reading that directory once indexing is
done (the embedded index reads other processes' writes when it opens).

Every call goes through engram.client. The timed searches are one attempt each (retries off,
30 s deadline), so a latency is one call's; loading and polling keep the client's retries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import ir_measures
from benchlib import free_port, spawn
from ir_measures import R, nDCG

from engram.client import AsyncClient, Space

SELF = Path(__file__).resolve()
ROOT = SELF.parents[1]
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "scifact"
SPACE = Space(name="quality")
MODES = ("lexical", "semantic", "hybrid")
MEASURES = [nDCG @ 10, R @ 100]
JWT_SECRET = "quality-bench-secret-0123456789abcdef0123456789"
# Bounds on the waits.
INDEX_TIMEOUT_SECONDS = 3600.0
START_TIMEOUT_SECONDS = 120.0


# --- the dataset ----------------------------------------------------------------------------


def load_dataset(
    root: Path, split: str
) -> tuple[dict[str, str], dict[str, str], list[ir_measures.Qrel]]:
    """(documents by id as Markdown, test queries by id, qrels)."""
    documents = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            documents[entry["_id"]] = f"# {entry['title']}\n\n{entry['text']}"
    qrels = []
    with open(root / "qrels" / f"{split}.tsv", encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            query_id, doc_id, score = line.strip().split("\t")
            qrels.append(ir_measures.Qrel(query_id, doc_id, int(score)))
    wanted = {q.query_id for q in qrels}
    queries = {}
    with open(root / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            if entry["_id"] in wanted:
                queries[entry["_id"]] = entry["text"]
    return documents, queries, qrels


def document_path(doc_id: str) -> str:
    return f"{doc_id}.md"


# --- talking to the service -----------------------------------------------------------------


async def write_corpus(
    client: AsyncClient,
    documents: dict[str, str],
    *,
    space: Space = SPACE,
    concurrency: int = 16,
) -> None:
    """Writes each document at `<doc id>.md` in `space` (replaces: the client may repeat
    one that failed UNAVAILABLE)."""
    writes = client.with_options(timeout=60)
    pending = list(documents.items())
    started = time.perf_counter()

    async def writer() -> None:
        while pending:
            doc_id, content = pending.pop()
            await writes.write_document(document_path(doc_id), content, space=space)

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    print(f"wrote {len(documents):,} documents in {time.perf_counter() - started:.1f} s")


async def wait_until_empty(backlog: Callable[[], Awaitable[float]], what: str) -> float:
    """Polls `backlog` until it stays 0 for 3 s (reporting it every 30 s); returns the
    seconds waited."""
    started = time.perf_counter()
    empty_since: float | None = None
    last_report = 0.0
    while time.perf_counter() - started < INDEX_TIMEOUT_SECONDS:
        pending = await backlog()
        now = time.perf_counter()
        if pending == 0:
            empty_since = empty_since or now
            if now - empty_since >= 3.0:
                return now - started
        else:
            empty_since = None
        if now - last_report > 30:
            print(f"  {what} {pending:,.0f} after {now - started:.0f} s", flush=True)
            last_report = now
        await asyncio.sleep(0.5)
    raise SystemExit(f"{what} did not reach 0 within {INDEX_TIMEOUT_SECONDS:.0f} s")


async def wait_until_published(metrics_url: str) -> float:
    """Waits until storage's outbox gauge stays 0: every write's event has reached JetStream
    (IndexerService's backlog only sees events already there)."""
    import urllib.request

    def read_gauge() -> float:
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("engram_outbox_backlog "):
                    return float(line.split()[1])
        raise SystemExit(f"no engram_outbox_backlog at {metrics_url}")

    async def backlog() -> float:
        return await asyncio.to_thread(read_gauge)

    return await wait_until_empty(backlog, "storage outbox")


async def wait_until_indexed(client: AsyncClient) -> float:
    """Waits until the indexer's backlog stays empty."""
    polls = client.with_options(timeout=30)

    async def backlog() -> float:
        return float((await polls.index_status()).backlog)

    return await wait_until_empty(backlog, "index backlog")


async def run_queries(
    client: AsyncClient, queries: dict[str, str], mode: str
) -> tuple[dict[str, dict[str, float]], list[float]]:
    """The run (query id -> doc id -> score, best chunk's rank first) and latencies in ms."""
    # Timed: one attempt per search (a retry's backoff would count as latency).
    timed = client.with_options(retries=0, timeout=30)
    run: dict[str, dict[str, float]] = {}
    latencies = []
    degraded = 0
    for query_id, text in queries.items():
        started = time.perf_counter()
        response = await timed.search(text, spaces=[SPACE], limit=100, mode=mode)
        latencies.append((time.perf_counter() - started) * 1000)
        degraded += response.degraded
        ranked: dict[str, float] = {}
        for result in response.results:
            doc_id = result.path.removesuffix(".md")
            if doc_id not in ranked:
                ranked[doc_id] = float(100 - len(ranked))
        run[query_id] = ranked
    if degraded:
        print(f"  warning: {degraded} degraded answers in {mode} mode")
    return run, latencies


async def evaluate(
    search_addr: str,
    queries: dict[str, str],
    qrels: list[ir_measures.Qrel],
    token: str,
    modes: list[str],
) -> dict[str, dict[str, float]]:
    scores = {}
    async with AsyncClient(search_addr, token=token) as client:
        await client.wait_ready(START_TIMEOUT_SECONDS)
        for mode in modes:
            run, latencies = await run_queries(client, queries, mode)
            aggregate = ir_measures.calc_aggregate(MEASURES, qrels, run)
            scores[mode] = {str(m): float(v) for m, v in aggregate.items()}
            latencies.sort()
            scores[mode]["p50 ms"] = latencies[len(latencies) // 2]
    return scores


def report(scores: dict[str, dict[str, float]], label: str) -> None:
    print(f"\n### {label}\n")
    print("| mode | nDCG@10 | Recall@100 | search p50 (limit 100) |")
    print("|---|---|---|---|")
    for mode, values in scores.items():
        print(
            f"| {mode} | {values['nDCG@10']:.3f} | {values['R@100']:.3f} | "
            f"{values['p50 ms']:.1f} ms |"
        )
    best_single = max(scores[m]["nDCG@10"] for m in ("lexical", "semantic") if m in scores)
    if "hybrid" in scores:
        gap = scores["hybrid"]["nDCG@10"] - best_single
        print(f"\nhybrid - max(lexical, semantic) nDCG@10: {gap:+.3f}")
    sys.stdout.flush()


# --- the deployments ------------------------------------------------------------------------


async def ready(port: int) -> None:
    async with AsyncClient(f"127.0.0.1:{port}") as client:
        await client.wait_ready(START_TIMEOUT_SECONDS)


@contextlib.asynccontextmanager
async def process(
    command: list[str], env: dict[str, str], log: Path, port: int
) -> AsyncIterator[str]:
    started = await asyncio.to_thread(spawn, command, env, log)
    try:
        await ready(port)
        yield f"127.0.0.1:{port}"
    finally:
        started.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(started.wait, 60)
        except subprocess.TimeoutExpired:
            started.kill()


def base_env(workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_DATA_DIR": str(workdir / "engram"),
    }


def mint(subject: str, **claims: Any) -> str:
    import jwt

    body = {"sub": subject, "exp": int(time.time()) + 24 * 3600, **claims}
    return jwt.encode(body, JWT_SECRET, algorithm="HS256")


def load_launcher() -> Any:
    spec = importlib.util.spec_from_file_location("backends", ROOT / "deploy/local/backends.py")
    assert spec and spec.loader
    launcher = importlib.util.module_from_spec(spec)
    sys.modules["backends"] = launcher
    spec.loader.exec_module(launcher)
    return launcher


async def run_embedded(args: argparse.Namespace, data: tuple[Any, ...]) -> None:
    documents, queries, qrels = data
    port = free_port()
    command = [sys.executable, "-m", "engram", "dev", "--port", str(port)]
    env = base_env(args.work_dir)
    async with process(command, env, args.work_dir / "engram-dev.log", port) as addr:
        async with AsyncClient(addr) as client:
            await write_corpus(client, documents)
            waited = await wait_until_indexed(client)
        print(f"indexed {waited:.0f} s after the last write")
        report(await evaluate(addr, queries, qrels, "", args.modes), "engram dev")


async def run_real(args: argparse.Namespace, data: tuple[Any, ...]) -> None:
    documents, queries, qrels = data
    launcher = load_launcher()
    started = []
    urls = {}
    for name, variable in (
        ("nats", "ENGRAM_TEST_NATS_URL"),
        ("mongo", "ENGRAM_TEST_MONGO_URI"),
        ("opensearch", "ENGRAM_TEST_OPENSEARCH_URL"),
    ):
        given = os.environ.get(variable)
        if given:
            urls[name] = given
            continue
        launcher.provision([name])
        backend = getattr(launcher, f"start_{name}")(args.work_dir / name)
        started.append(backend)
        urls[name] = backend.url
    run_id = f"{int(time.time()):x}"
    env = {
        **base_env(args.work_dir),
        "ENGRAM_NATS_URL": urls["nats"],
        "ENGRAM_MONGO_URI": urls["mongo"],
        "ENGRAM_MONGO_DB": f"engram_quality_{run_id}",
        "ENGRAM_OPENSEARCH_URL": urls["opensearch"],
        "ENGRAM_OPENSEARCH_INDEX": f"engram-quality-{run_id}",
        "ENGRAM_OPENSEARCH_REPLICAS": "0",
        "ENGRAM_JWT_SECRET": JWT_SECRET,
        "ENGRAM_VECTOR_DIR": str(args.work_dir / f"vectors-{run_id}"),
    }
    user = mint("bench", tenant="bench", role="member")
    try:
        storage_port, indexer_port, search_port = free_port(), free_port(), free_port()
        env["ENGRAM_STORAGE_ADDR"] = f"127.0.0.1:{storage_port}"
        env["ENGRAM_SERVICE_TOKEN"] = mint("indexer", service=True)
        logs = args.work_dir
        serve = [sys.executable, "-m", "engram", "serve"]
        async with contextlib.AsyncExitStack() as stack:
            metrics_port = free_port()
            storage = await stack.enter_async_context(
                process(
                    [*serve, "storage", "--port", str(storage_port)],
                    {**env, "ENGRAM_METRICS_PORT": str(metrics_port)},
                    logs / "storage.log",
                    storage_port,
                )
            )
            indexer = await stack.enter_async_context(
                process(
                    [*serve, "indexer", "--port", str(indexer_port)],
                    env,
                    logs / "indexer.log",
                    indexer_port,
                )
            )
            async with AsyncClient(storage, token=user) as client:
                await write_corpus(client, documents)
            published = await wait_until_published(f"http://127.0.0.1:{metrics_port}/metrics")
            print(f"every event published {published:.0f} s after the last write")
            async with AsyncClient(indexer, token=user) as client:
                waited = await wait_until_indexed(client)
            print(f"indexed {waited:.0f} s after the last write")
            command = [sys.executable, str(SELF), "serve-search", "--port", str(search_port)]
            search = await stack.enter_async_context(
                process(command, env, logs / "search.log", search_port)
            )
            scores = await evaluate(search, queries, qrels, user, args.modes)
        report(scores, "OpenSearch + indexer + search processes (embedded vector index)")
    finally:
        for backend in started:
            backend.stop()


async def serve_search(args: argparse.Namespace) -> None:
    """`engram serve search` with the embedded vector index at ENGRAM_VECTOR_DIR in place of
    the Qdrant server."""
    from engram.app.production import search_on_backends
    from engram.indexes.vector.numpy_index import NumpyVectorIndex
    from engram.runtime.server import stop_on_signals
    from engram.runtime.settings import Settings

    settings = Settings(grpc_port=args.port)
    assert settings.vector_dir is not None, "ENGRAM_VECTOR_DIR is required"
    stop = asyncio.Event()
    async with search_on_backends(settings, vector=NumpyVectorIndex(settings.vector_dir)):
        stop_on_signals(stop.set)
        await stop.wait()


async def run_remote(args: argparse.Namespace, data: tuple[Any, ...]) -> None:
    documents, queries, qrels = data
    token = args.token
    async with AsyncClient(args.addr, token=token) as client:
        await write_corpus(client, documents)
    async with AsyncClient(args.indexer_addr or args.addr, token=token) as client:
        waited = await wait_until_indexed(client)
    print(f"indexed {waited:.0f} s after the last write")
    scores = await evaluate(args.search_addr or args.addr, queries, qrels, token, args.modes)
    report(scores, f"deployment at {args.addr}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="bench", choices=("bench", "serve-search"))
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--split", default="test")
    parser.add_argument("--target", choices=("embedded", "real"), default="embedded")
    parser.add_argument("--addr", help="StorageService of a running deployment")
    parser.add_argument("--search-addr", help="SearchService, if not at --addr")
    parser.add_argument("--indexer-addr", help="IndexerService, if not at --addr")
    parser.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN", ""))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.command == "serve-search":
        await serve_search(args)
        return
    args.work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="engram-quality-"))
    await asyncio.to_thread(args.work_dir.mkdir, parents=True, exist_ok=True)
    data = await asyncio.to_thread(load_dataset, args.dataset, args.split)
    documents, queries, qrels = data
    print(
        f"{args.dataset.name}: {len(documents):,} documents, {len(queries)} {args.split} "
        f"queries, {len(qrels)} judgements; work dir {args.work_dir}"
    )
    if args.addr:
        await run_remote(args, data)
    elif args.target == "real":
        await run_real(args, data)
    else:
        await run_embedded(args, data)


if __name__ == "__main__":
    asyncio.run(main())
