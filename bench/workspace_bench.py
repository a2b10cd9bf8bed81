"""Workspace benchmark: MemoryWrite (daily-log append) and MemorySearch latency through gRPC.

    python bench/workspace_bench.py                       # starts `engram dev`, load from ghz
    python bench/workspace_bench.py --client python       # asyncio client instead of ghz
    python bench/workspace_bench.py --addr HOST:PORT [--token T]   # a server already running
    python bench/workspace_bench.py --mcp                 # hosted `engram mcp` vs direct calls

It starts `engram dev` on a fresh data directory, seeds one workspace (SeedWorkspace), loads
a modest corpus of notes into it (`--docs` documents of ~3 chunks of synthetic English,
through StorageService), waits until the indexer has caught up, then measures, per RPC, p50
and p99 at concurrency 1 and 16 (`--count` calls each, capped at `--time-cap` seconds):

- MemoryWrite with target daily_log (append, the default): at concurrency 1 every entry goes
  to today's `daily/YYYY-MM-DD.md`; at concurrency 16 each of 16 sessions appends to its own
  `daily/YYYY-MM-DD-<session>.md` (what concurrent surfaces of one agent do). Every entry is
  new text, so the in-process indexer embeds during the write rows as it would in use.
- MemorySearch (limit 5), after waiting for the writes to be indexed; every query is a
  distinct sentence, so each call embeds its query (no query-cache hits).
- Baselines at concurrency 1 and 16 on the same server: StorageService.WriteDocument appending
  the same kind of entry, and SearchService.Search with the same kind of query: what the
  workspace calls underneath, so its own cost (authorization, the write limiter's two
  counters, the daily-log path and header) shows as the difference.

Rate limit: workspace writes are limited per agent (20/min, 200/h by default), which would
refuse a benchmark after 20 calls. The server started here gets
ENGRAM_WORKSPACE_WRITES_PER_MINUTE / _PER_HOUR = 10,000,000: the limiter still counts every
write in its SQLite windows (its cost is measured), it just never refuses. Against `--addr`
the server's own limits apply.

Load comes from ghz when it is installed (`python bench/storage_bench.py` installs it), so
that on a 2-core machine the client does not take the server's CPU; every loop is bounded by
a count and a time cap. With `--client python` the same messages go through engram.client,
one attempt per call (retries off, a 30 s deadline: a latency is one call's), on a channel
connected before each row starts. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import closed_loop, free_port
from search_bench import GHZ, distinct_queries, percentile, sentence, server_env, server_process

from engram.client import AsyncClient, Space

ROOT = Path(__file__).resolve().parents[1]
SPACE = Space(visibility="private", name="workspace-bench")
SEED = 20261201
# High enough never to refuse a run, so the limiter still counts every write.
BENCH_WRITE_LIMIT = 10_000_000
SESSIONS = 16
SEARCH_LIMIT = 5
WARMUP = 30
INDEX_WAIT_SECONDS = 300.0
# Each timed call's deadline (--client python).
CALL_TIMEOUT = 30.0

Row = tuple[str, ...]


def corpus(documents: int) -> list[tuple[str, str]]:
    """(path, content) of `documents` notes of about three 500-character chunks each."""
    rng = random.Random(SEED)
    notes = []
    for number in range(documents):
        paragraphs = [" ".join(sentence(rng) for _ in range(6)) for _ in range(4)]
        title = f"# Notes {number}"
        notes.append(
            (f"notes/{number // 50:02d}/note-{number:04d}.md", "\n\n".join([title, *paragraphs]))
        )
    return notes


async def wait_until_indexed(client: AsyncClient) -> float:
    """Waits for the indexer's backlog to drain; returns the seconds waited."""
    started = time.perf_counter()
    deadline = started + INDEX_WAIT_SECONDS
    while time.perf_counter() < deadline:
        status = await client.index_status()
        if status.backlog == 0:
            return time.perf_counter() - started
        await asyncio.sleep(0.1)
    raise SystemExit(f"the indexer still has a backlog after {INDEX_WAIT_SECONDS:.0f} s")


async def prepare(addr: str, token: str, documents: int) -> None:
    """Seeds the workspace, loads the corpus and waits until both are indexed."""
    async with AsyncClient(addr, token=token, space=SPACE) as client:
        seeded = await client.seed_workspace()
        notes = corpus(documents)
        started = time.perf_counter()
        pending = list(reversed(notes))

        async def loader() -> None:
            while pending:
                path, content = pending.pop()
                await client.write_document(path, content)

        await asyncio.gather(*(loader() for _ in range(8)))
        loaded = time.perf_counter() - started
        waited = await wait_until_indexed(client)
        chars = sum(len(content) for _, content in notes)
        print(
            f"seeded {len(seeded.created_paths)} templates; loaded {len(notes)} notes "
            f"({chars / 1000:.0f} kB) in {loaded:.1f} s, indexed {waited:.1f} s later",
            flush=True,
        )


Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Method:
    """An RPC the bench calls: for ghz (proto file, full name, the message as JSON) and for
    engram.client (`send`: the same message as the client's call)."""

    label: str
    proto: str
    call: str
    send: Callable[[AsyncClient, Message], Awaitable[object]]


MEMORY_WRITE = Method(
    "MemoryWrite (daily log)",
    "workspace.proto",
    "engram.v1.WorkspaceService.MemoryWrite",
    lambda client, m: client.memory_write(
        m["content"], target="daily_log", session=m.get("session", "")
    ),
)
MEMORY_SEARCH = Method(
    "MemorySearch",
    "workspace.proto",
    "engram.v1.WorkspaceService.MemorySearch",
    lambda client, m: client.memory_search(m["query"], limit=m["limit"]),
)
# Baselines: what the workspace calls underneath, straight through StorageService and
# SearchService on the same server, so the workspace layer's own cost shows.
STORAGE_APPEND = Method(
    "baseline: WriteDocument append",
    "storage.proto",
    "engram.v1.StorageService.WriteDocument",
    lambda client, m: client.write_document(m["path"], m["content"], append=True),
)
SEARCH = Method(
    "baseline: Search (hybrid)",
    "search.proto",
    "engram.v1.SearchService.Search",
    lambda client, m: client.search(m["query"], limit=m["limit"]),
)
SPACE_JSON = {"visibility": "VISIBILITY_PRIVATE", "name": SPACE.name}


def entry(i: int) -> str:
    return f"entry {i}: {sentence(random.Random(SEED + i))}"


def write_message(i: int, *, concurrency: int) -> dict[str, Any]:
    """MemoryWrite as JSON (ghz and the Python client send the same messages)."""
    message: dict[str, Any] = {
        "space": SPACE_JSON,
        "target": "MEMORY_TARGET_DAILY_LOG",
        "content": entry(i),
    }
    if concurrency > 1:
        message["session"] = f"s{i % SESSIONS:02d}"
    return message


def append_message(i: int, *, concurrency: int) -> dict[str, Any]:
    """The storage append a daily-log MemoryWrite makes, to logs of its own."""
    day = datetime.now(UTC).date().isoformat()
    session = f"-s{i % SESSIONS:02d}" if concurrency > 1 else ""
    return {
        "space": SPACE_JSON,
        "path": f"daily/{day}-baseline{session}.md",
        "content": f"[{datetime.now(UTC):%H:%M:%S}] {entry(i)}",
        "mode": "WRITE_MODE_APPEND",
    }


def search_message(query: str) -> dict[str, Any]:
    return {"space": SPACE_JSON, "query": query, "limit": SEARCH_LIMIT}


def baseline_search_message(query: str) -> dict[str, Any]:
    return {"spaces": [SPACE_JSON], "query": query, "limit": SEARCH_LIMIT}


def run_ghz(
    addr: str,
    token: str,
    method: Method,
    messages: list[dict[str, Any]],
    concurrency: int,
    cap: float,
) -> tuple[list[float], float]:
    """Latencies (ms) and calls/s of one ghz run sending each of `messages` once; exits on a
    failed call or when the run takes longer than `cap` (ghz's duration flag ignores counts)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as data:
        json.dump(messages, data)
    command = [
        str(GHZ),
        "--insecure",
        "--proto",
        str(ROOT / "protos/engram/v1" / method.proto),
        "--import-paths",
        str(ROOT / "protos"),
        "--call",
        method.call,
        "--data-file",
        data.name,
        "-c",
        str(concurrency),
        "-n",
        str(len(messages)),
        "--format",
        "json",
        addr,
    ]
    if token:
        command[1:1] = ["--metadata", json.dumps({"authorization": f"Bearer {token}"})]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=cap)
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"{method.call} at concurrency {concurrency} passed {cap:.0f} s: lower --count"
        ) from None
    finally:
        os.unlink(data.name)
    report: dict[str, Any] = json.loads(completed.stdout)
    codes = report.get("statusCodeDistribution", {})
    if set(codes) != {"OK"}:
        raise SystemExit(f"{method.call} failed: {codes} {report.get('errorDistribution')}")
    return [detail["latency"] / 1e6 for detail in report["details"]], float(report["rps"])


async def run_python(
    addr: str,
    token: str,
    method: Method,
    messages: list[dict[str, Any]],
    concurrency: int,
    cap: float,
) -> tuple[list[float], float]:
    """The same run with engram.client (closed loop): one attempt per call, retries off,
    so that a latency is one call's (a retry's backoff is not the server's time)."""
    async with AsyncClient(
        addr, token=token, space=SPACE, retries=0, timeout=CALL_TIMEOUT
    ) as client:
        await client.wait_ready(CALL_TIMEOUT)

        async def one(i: int) -> object:
            return await method.send(client, messages[i])

        latencies, elapsed = await closed_loop(
            one, count=len(messages), concurrency=concurrency, cap=cap
        )
    return latencies, len(latencies) / elapsed


async def measure(args: argparse.Namespace, addr: str, token: str) -> list[Row]:
    """Writes (and the storage baseline), then, once they are indexed, searches."""
    queries = iter(distinct_queries(2 * WARMUP + 4 * args.count, SEED))
    rows: list[Row] = []

    async def phase(
        method: Method, messages: list[dict[str, Any]], concurrency: int, *, warm: bool = False
    ) -> None:
        if args.client == "ghz":
            latencies, rate = await asyncio.to_thread(
                run_ghz, addr, token, method, messages, concurrency, args.time_cap
            )
        else:
            latencies, rate = await run_python(
                addr, token, method, messages, concurrency, args.time_cap
            )
        if warm:  # connections, caches, the first embedding: not counted
            return
        median, p99 = statistics.median(latencies), percentile(latencies, 99)
        rows.append(
            (
                method.label,
                str(concurrency),
                str(len(latencies)),
                f"{median:.2f}",
                f"{p99:.2f}",
                f"{rate:,.0f}",
            )
        )

    count = args.count
    numbers = itertools.count()

    def writes(n: int, concurrency: int = 1) -> list[dict[str, Any]]:
        return [write_message(next(numbers), concurrency=concurrency) for _ in range(n)]

    def appends(n: int, concurrency: int = 1) -> list[dict[str, Any]]:
        return [append_message(next(numbers), concurrency=concurrency) for _ in range(n)]

    def searches(n: int, shape: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
        return [shape(next(queries)) for _ in range(n)]

    await phase(MEMORY_WRITE, writes(WARMUP), 1, warm=True)
    await phase(STORAGE_APPEND, appends(WARMUP), 1, warm=True)
    await phase(MEMORY_WRITE, writes(count), 1)
    await phase(STORAGE_APPEND, appends(count), 1)
    await phase(MEMORY_WRITE, writes(count, 16), 16)
    await phase(STORAGE_APPEND, appends(count, 16), 16)
    async with AsyncClient(addr, token=token) as client:
        waited = await wait_until_indexed(client)
    print(f"the bench's daily-log entries were indexed {waited:.1f} s after the last write")
    await phase(MEMORY_SEARCH, searches(WARMUP, search_message), 1, warm=True)
    await phase(SEARCH, searches(WARMUP, baseline_search_message), 1, warm=True)
    await phase(MEMORY_SEARCH, searches(count, search_message), 1)
    await phase(SEARCH, searches(count, baseline_search_message), 1)
    await phase(MEMORY_SEARCH, searches(count, search_message), 16)
    await phase(SEARCH, searches(count, baseline_search_message), 16)
    return rows


@contextlib.asynccontextmanager
async def dev_server(workdir: Path) -> AsyncIterator[str]:
    port = free_port()
    env = {
        **server_env(),
        "ENGRAM_WORKSPACE_WRITES_PER_MINUTE": str(BENCH_WRITE_LIMIT),
        "ENGRAM_WORKSPACE_WRITES_PER_HOUR": str(BENCH_WRITE_LIMIT),
    }
    command = [
        sys.executable,
        "-m",
        "engram",
        "dev",
        "--port",
        str(port),
        "--data-dir",
        str(workdir / "engram"),
    ]
    async with server_process(command, env, workdir / "server.log", port) as addr:
        yield addr


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="calls per row")
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per row")
    parser.add_argument("--docs", type=int, default=200, help="notes loaded before measuring")
    parser.add_argument("--client", choices=("ghz", "python"), default="ghz")
    parser.add_argument("--addr", help="measure a server already running (its limits apply)")
    parser.add_argument("--token", default="")
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="hosted engram mcp against the direct WorkspaceService call, and 50 agents "
        "(bench/mcp_bench.py; --count there defaults to 300)",
    )
    parser.add_argument("--agents", type=int, default=50, help="--mcp: concurrent agents")
    parser.add_argument("--seconds", type=float, default=30.0, help="--mcp: the agents' run")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="--mcp: another checkout whose hosted engram mcp runs beside this one's",
    )
    args = parser.parse_args()
    if args.mcp:
        import mcp_bench

        await mcp_bench.run(args)
        return
    if args.client == "ghz" and not GHZ.exists():
        print(f"no ghz at {GHZ} (`python bench/storage_bench.py` installs it): --client python")
        args.client = "python"
    load_before = os.getloadavg()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="engram-workspace-bench-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            if args.addr:
                addr = args.addr
                print(f"server: {addr} (its own workspace write limits apply)")
            else:
                addr = await stack.enter_async_context(dev_server(Path(tmp)))
                print(
                    f"server: engram dev on {addr}, workspace write limit raised to "
                    f"{BENCH_WRITE_LIMIT:,}/min and /h (ENGRAM_WORKSPACE_WRITES_PER_MINUTE/"
                    "_PER_HOUR) so the bench is counted but never refused"
                )
            await prepare(addr, args.token, args.docs)
            rows = await measure(args, addr, args.token)
    load_after = os.getloadavg()
    print(
        f"\n{started:%Y-%m-%d %H:%M} UTC, client {args.client}, {args.count} calls per row "
        f"(cap {args.time_cap:.0f} s); load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after\n"
    )
    print("| RPC | concurrency | calls | p50 ms | p99 ms | calls/s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\ntargets: MemoryWrite p50 <= 5 ms, MemorySearch p50 <= 15 ms")


if __name__ == "__main__":
    asyncio.run(main())
