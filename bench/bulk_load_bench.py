"""A user's first bulk load (issue 29): all of BEIR SciFact written through `engram dev`'s
public API with the maintenance schedule on, as users run it, until every document is
searchable in both legs of hybrid search.

    .venv/bin/python bench/bulk_load_bench.py [--concurrency 8] [--raw-sample 256]

`engram dev --auth` runs in its own process with its default settings (the schedule's first
walk comes a minute after start, while the load is being indexed). Each corpus entry becomes
`<id>.md` holding `# <title>\\n\\n<text>` (the dataset's scoring convention), written with
`engram.client` WriteDocument calls by `--concurrency` writers. Then the index backlog
(GetIndexStatus) is polled until it is empty, and every document is checked through
SearchService: a hybrid search for its title under its own path must return a chunk of it
from the keyword leg and one from the vector leg. Documents not yet found are polled until
they are (bounded).

Printed: wall time from the first write to every document searchable, chunks/s over it, the
server process's CPU seconds (every thread, from /proc) per chunk over the same interval,
and - in the same run, before the server starts - the raw model's cost per chunk on a sample
of the same chunks (`index_bench.raw_model_cost`: the onnxruntime session alone, inputs
tokenized beforehand, batch 32 and batch 1), and their ratio. Also what the scheduled
`embedding_backfill` did to the load: documents re-queued (re-indexed twice) and left to
their pending events. The machine's load average is printed before and after: on a shared
machine, CPU per chunk is the comparable figure, wall time is not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import free_port, process_cpu, spawn
from index_bench import cpu_flags, raw_model_cost
from quality import document_path, load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engram.client import EngramClient, EngramError, Space  # noqa: E402
from engram.domain.chunking import build_chunks  # noqa: E402
from engram.runtime.settings import Settings  # noqa: E402
from tests.support.tokens import TEST_JWT_SECRET, mint  # noqa: E402

SPACE = Space(name="scifact")
# Bounds on the waits.
START_TIMEOUT_SECONDS = 120.0
INDEX_TIMEOUT_SECONDS = 3600.0
VERIFY_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 1.0
# Words of a document's text after its title that its searchability probe adds.
PROBE_WORDS = 8
BACKFILL = "embedding_backfill"


def default_dataset() -> Path:
    """shared/datasets/scifact beside the checkout (the main one or a worktree's parent)."""
    for parent in Path(__file__).resolve().parents[1:]:
        if (parent / "shared" / "datasets" / "scifact").is_dir():
            return parent / "shared" / "datasets" / "scifact"
    return Path("shared/datasets/scifact")


@dataclass(frozen=True)
class Corpus:
    documents: dict[str, str]  # path -> Markdown
    titles: dict[str, str]  # path -> title
    # path -> what the searchability check asks: the title and the text's first words (a
    # title can be a stop word alone: document 17695748's is "in", which BM25 never matches).
    probes: dict[str, str]
    chunks: list[str]  # each chunk as the indexer embeds it


def load_corpus(root: Path, settings: Settings, limit: int) -> Corpus:
    by_id, _, _ = load_dataset(root, "test")
    entries = list(by_id.items())[: limit or None]
    documents = {document_path(doc_id): text for doc_id, text in entries}
    titles = {path: text.split("\n", 1)[0].removeprefix("# ") for path, text in documents.items()}
    probes = {
        path: " ".join(text.removeprefix("# ").split()[: len(titles[path].split()) + PROBE_WORDS])
        for path, text in documents.items()
    }
    # What the indexer embeds: each chunk's heading trail (here the document's title), then
    # its text (Chunk.indexed_text), so the raw model is timed on the same inputs.
    chunks = [
        chunk.indexed_text
        for path, text in documents.items()
        for chunk in build_chunks(
            space_id="s",
            tenant="t",
            path=path,
            document_id=path,
            version=1,
            content=text,
            size=settings.chunk_size,
            overlap=settings.chunk_overlap,
        )
    ]
    return Corpus(documents, titles, probes, chunks)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def write_all(client: EngramClient, documents: dict[str, str], concurrency: int) -> float:
    """Writes every document; returns the seconds the writes took."""
    pending = list(documents.items())
    started = time.perf_counter()

    async def writer() -> None:
        while pending:
            path, content = pending.pop()
            await client.write_document(path, content)

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return time.perf_counter() - started


async def wait_backlog_empty(client: EngramClient, since: float) -> None:
    """Polls the index backlog until it reads 0 twice in a row, reporting every 30 s."""
    deadline = time.perf_counter() + INDEX_TIMEOUT_SECONDS
    zeros = 0
    reported = time.perf_counter()
    while time.perf_counter() < deadline:
        status = await client.index_status()
        zeros = zeros + 1 if status.backlog == 0 else 0
        if zeros >= 2:
            return
        if time.perf_counter() - reported >= 30:
            reported = time.perf_counter()
            print(
                f"  {reported - since:6.0f} s: backlog {status.backlog:,} events, "
                f"load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        await asyncio.sleep(POLL_SECONDS)
    raise SystemExit(f"index backlog not empty after {INDEX_TIMEOUT_SECONDS:.0f} s")


async def searchable(client: EngramClient, path: str, probe: str) -> bool:
    """Both legs of hybrid search return a chunk of the document at `path`."""
    found = await client.search(probe or path, path_prefix=path, limit=10)
    hits = [hit for hit in found.results if hit.path == path]
    return any(hit.bm25_rank for hit in hits) and any(hit.vector_rank for hit in hits)


async def unsearchable(client: EngramClient, corpus: Corpus, paths: list[str]) -> list[str]:
    """The paths among `paths` not yet searchable in both legs (checked 4 at a time)."""
    todo = list(paths)
    missing: list[str] = []

    async def checker() -> None:
        while todo:
            path = todo.pop()
            if not await searchable(client, path, corpus.probes[path]):
                missing.append(path)

    await asyncio.gather(*(checker() for _ in range(4)))
    return missing


async def backfill_runs(client: EngramClient) -> list[str]:
    page = await client.list_job_runs(job=BACKFILL, page_size=100)
    return [
        f"{run.started_at:%H:%M:%S} {run.outcome}: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(run.counts.items()))
        for run in reversed(page.items)
    ]


async def load(args: argparse.Namespace, corpus: Corpus, workdir: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
        "ENGRAM_ACCESS_LOG": "false",
    }
    if args.indexing_nice is not None:
        env["ENGRAM_INDEXING_NICE"] = str(args.indexing_nice)
    log = workdir / "server.log"
    server = spawn(
        [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port)]
        + ["--data-dir", str(workdir / "state")],
        env,
        log,
    )
    try:
        token = mint("ann", "acme", "member", ttl=4 * 3600)
        addr = f"127.0.0.1:{port}"
        async with EngramClient(addr, token=token, retries=0, timeout=5) as probe:
            deadline = time.perf_counter() + START_TIMEOUT_SECONDS
            while True:
                try:
                    await probe.index_status()
                    break
                except EngramError:  # not serving yet
                    if time.perf_counter() > deadline or server.poll() is not None:
                        raise SystemExit(f"engram dev did not start; see {log}") from None
                    await asyncio.sleep(0.5)
        async with EngramClient(addr, token=token, space=SPACE) as client:
            cpu_before = process_cpu(server.pid)
            started = time.perf_counter()
            print(f"writing {len(corpus.documents):,} documents ...", flush=True)
            wrote = await write_all(client, corpus.documents, args.concurrency)
            print(f"  written in {wrote:.1f} s ({len(corpus.documents) / wrote:.0f}/s)")
            await wait_backlog_empty(client, started)
            empty_at = time.perf_counter() - started
            cpu_at_empty = process_cpu(server.pid) - cpu_before
            print(f"  backlog empty {empty_at:.0f} s after the first write", flush=True)
            # Checking costs the server CPU (a query embedding per document): the CPU figure
            # is taken when the backlog emptied, and the wall time ends when the last
            # document is found.
            missing = await unsearchable(client, corpus, list(corpus.documents))
            print(f"  after the backlog emptied, {len(missing)} documents not yet searchable")
            wall = empty_at
            verify_deadline = time.perf_counter() + VERIFY_TIMEOUT_SECONDS
            while missing and time.perf_counter() < verify_deadline:
                await asyncio.sleep(POLL_SECONDS)
                missing = await unsearchable(client, corpus, missing)
                wall = time.perf_counter() - started
            if missing:
                raise SystemExit(f"{len(missing)} documents never searchable, e.g. {missing[:3]}")
            runs = await backfill_runs(client)
        chunks = len(corpus.chunks)
        per_chunk_ms = cpu_at_empty / chunks * 1000
        raw = args.raw
        print()
        print(f"documents {len(corpus.documents):,}, chunks {chunks:,}")
        print(f"first write -> every document searchable (both legs): {wall:.0f} s")
        print(f"throughput: {chunks / wall:.1f} chunks/s")
        print(
            f"server CPU, first write -> backlog empty: {cpu_at_empty:.0f} s = "
            f"{per_chunk_ms:.1f} ms per chunk ({cpu_at_empty / empty_at:.2f} cores busy)"
        )
        print(
            f"  = {per_chunk_ms / raw.batch32_ms:.2f}x the raw model at batch 32 "
            f"({raw.batch32_ms:.2f} ms), {per_chunk_ms / raw.batch1_ms:.2f}x at batch 1 "
            f"({raw.batch1_ms:.2f} ms), {per_chunk_ms / raw.batch32_two_callers_ms:.2f}x at "
            f"batch 32 from two threads at once as the indexer runs it "
            f"({raw.batch32_two_callers_ms:.2f} ms)"
            + (
                f", {per_chunk_ms / raw.sustained_two_callers_ms:.2f}x the same kept up for "
                f"{raw.sustained_seconds:.0f} s ({raw.sustained_two_callers_ms:.2f} ms)"
                if raw.sustained_two_callers_ms is not None
                else ""
            )
        )
        print(f"{BACKFILL} runs during the load:")
        for line in runs or ["  none"]:
            print(f"  {line}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, default=default_dataset())
    parser.add_argument("--concurrency", type=int, default=8, help="writers")
    parser.add_argument(
        "--raw-sample", type=int, default=256, help="chunks the raw model is timed on"
    )
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--limit", type=int, default=0, help="only the first N documents")
    parser.add_argument(
        "--indexing-nice",
        type=int,
        default=None,
        help="ENGRAM_INDEXING_NICE for the server (default: the server's, 19); on a machine "
        "other jobs keep busy, indexing at 19 gets almost no CPU and the wall time measures "
        "them, not engram",
    )
    parser.add_argument(
        "--raw-sustained-seconds",
        type=float,
        default=60,
        help="also time the raw model from two threads at once for this long, both cores "
        "busy throughout as in the load (0: skip)",
    )
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}; {uptime()}", flush=True)
    print(f"CPU flags: {cpu_flags()}", flush=True)
    settings = Settings()
    corpus = load_corpus(args.dataset, settings, args.limit)
    rng = random.Random(args.seed)
    sample = rng.sample(corpus.chunks, min(args.raw_sample, len(corpus.chunks)))
    queries = rng.sample(list(corpus.titles.values()), min(32, len(corpus.titles)))
    args.raw = await asyncio.to_thread(
        raw_model_cost,
        sample,
        queries,
        max_length=settings.embed_max_length,
        sustained_seconds=args.raw_sustained_seconds,
    )
    print(f"on {len(sample)} of the corpus's chunks: {args.raw.report()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bulk-load-bench-") as workdir:
        await load(args, corpus, Path(workdir))
    print(f"after: {uptime()}")


if __name__ == "__main__":
    asyncio.run(main())
