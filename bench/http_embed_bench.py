"""Query embedding through an HTTP provider: concurrent queries sharing POSTs (issue 16, item 4).

    .venv/bin/python bench/http_embed_bench.py [--count 320] [--delay-ms 20] [--dimension 384]

The provider is the OpenAI-compatible test double (tests/support/openai_test_double.py) in
its own process, answering every POST after a fixed delay (default 20 ms, a hosted model's
round trip) with `--dimension`-wide vectors. The client is an `OpenAICompatibleEmbedder`
as search builds it, calling `embed_query` on distinct texts in a closed loop at each
concurrency, with query batching:

- off: ENGRAM_SEARCH_EMBED_MAX_BATCH=1 (window 0): every query its own POST, sent at once -
  the path every query took before batching;
- on, window 0: max batch 32, only queries arriving while all 4 POST slots are busy share;
- on, window 2 ms: the settings' defaults (2 ms, 32 per POST, 4 POSTs in flight).

Per run it prints queries/s, p50/p99 latency, POSTs per query (counted by the client's
HTTP hook) and CPU ms per query of the client process and of the provider process. Every
run is bounded by --count queries and --cap seconds. Figures go to bench/RESULTS.md by
hand.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from benchlib import closed_loop, percentile, process_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engram.indexer.embedders.http import QUERY_POSTS_IN_FLIGHT, QueryBatching  # noqa: E402
from engram.indexer.embedders.openai import OpenAICompatibleEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "off (max batch 1)": QueryBatching(window=0.0, max_batch=1),
    "on, window 0": QueryBatching(window=0.0, max_batch=32),
    "on, window 2 ms": QueryBatching(window=0.002, max_batch=32),
}


@dataclass(frozen=True)
class Row:
    config: str
    concurrency: int
    queries: int
    qps: float
    p50: float
    p99: float
    posts_per_query: float
    client_cpu_ms: float
    provider_cpu_ms: float


class Provider:
    """The test double in a child process (so its CPU is not the client's)."""

    def __init__(self, delay_ms: float, dimension: int) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.openai_test_double",
                f"--delay-ms={delay_ms}",
                f"--dimension={dimension}",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().decode().strip()
        if not self.base_url.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"the test double did not start: {self.base_url!r}")

    def cpu(self) -> float:
        return process_cpu(self.process.pid)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


async def run(
    provider: Provider,
    name: str,
    batching: QueryBatching,
    concurrency: int,
    args: argparse.Namespace,
) -> Row:
    posts = 0

    async def count(request: httpx.Request) -> None:
        nonlocal posts
        posts += 1

    client = httpx.AsyncClient(timeout=30.0, event_hooks={"request": [count]})
    embedder = OpenAICompatibleEmbedder(
        base_url=provider.base_url,
        model="bench",
        dimension=args.dimension,
        client=client,
        queries=batching,
    )
    try:
        # Connections opened before measuring, as in a warm server.
        await asyncio.gather(*(embedder.embed_query(f"warm {i}") for i in range(concurrency)))
        posts = 0
        cpu_client, cpu_provider = time.process_time(), provider.cpu()

        async def query(index: int) -> None:
            await embedder.embed_query(f"bench query {index} about topic {index % 97}")

        latencies, elapsed = await closed_loop(
            query, count=args.count, concurrency=concurrency, cap=args.cap
        )
        cpu_client = time.process_time() - cpu_client
        cpu_provider = provider.cpu() - cpu_provider
    finally:
        await embedder.aclose()
        await client.aclose()
    n = len(latencies)
    return Row(
        name,
        concurrency,
        n,
        n / elapsed,
        percentile(latencies, 50),
        percentile(latencies, 99),
        posts / n,
        cpu_client / n * 1000,
        cpu_provider / n * 1000,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=320, help="queries per run")
    parser.add_argument("--cap", type=float, default=30.0, help="seconds per run at most")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="provider's delay per POST")
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--concurrency", default="1,16", help="comma-separated")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    provider = Provider(args.delay_ms, args.dimension)
    rows: list[Row] = []
    try:
        for name, batching in CONFIGS.items():
            for concurrency in concurrencies:
                rows.append(await run(provider, name, batching, concurrency, args))
    finally:
        provider.stop()
    print(
        f"provider delay {args.delay_ms:g} ms per POST, {args.dimension} dimensions, "
        f"{QUERY_POSTS_IN_FLIGHT} POSTs in flight when batching"
    )
    print(
        "| batching | concurrency | queries | queries/s | p50 ms | p99 ms | POSTs/query "
        "| client CPU ms/query | provider CPU ms/query |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.config} | {r.concurrency} | {r.queries} | {r.qps:.0f} | {r.p50:.1f} "
            f"| {r.p99:.1f} | {r.posts_per_query:.3f} | {r.client_cpu_ms:.2f} "
            f"| {r.provider_cpu_ms:.2f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
