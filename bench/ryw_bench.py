"""Read-your-writes benchmark: how long until a write is searchable, on `engram dev`.

    python bench/ryw_bench.py [--pairs 100] [--time-cap 180]

Starts `engram dev` on a fresh data directory (its own process, a free port) and runs
write-then-search pairs one at a time: WriteDocument of a new note carrying a unique token,
then at once a Search for that token with the write's position (`min_positions`), once in
lexical mode and once in hybrid mode (alternating pairs). Printed per mode: the write's
latency, the search's latency (its wait included), the wait the server reports
(`waited_ms`), and how many searches found their write. For contrast, the same pair
without a position: how often an immediate search misses a write it just made.

Every loop is bounded by `--pairs` and `--time-cap`. Figures go to bench/RESULTS.md by hand,
measured under the bench lock with the load average next to them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchlib import free_port, percentile
from search_bench import server_env, server_process

from engram.client import AsyncClient, Space

SPACE = Space(name="ryw-bench")
MODES = ("lexical", "hybrid")


def body(token: str) -> str:
    return (
        f"Run note {token}: the agent deployed the billing service, noted the retries and "
        "filed a follow-up about the error budget for the on-call rota.\n"
    )


async def pairs(
    client: AsyncClient,
    *,
    count: int,
    cap: float,
    with_position: bool,
) -> dict[str, dict[str, list[float]]]:
    rows: dict[str, dict[str, list[float]]] = {
        mode: {"write": [], "search": [], "waited": [], "found": []} for mode in MODES
    }
    run = uuid.uuid4().hex[:8]
    deadline = time.monotonic() + cap
    for i in range(count):
        if time.monotonic() > deadline:
            break
        mode = list(MODES)[i % len(MODES)]
        token = f"tok{run}x{i:05d}"
        started = time.perf_counter()
        written = await client.write_document(f"bench/{run}-{i}.md", body(token))
        wrote = time.perf_counter()
        positions = [written.position] if with_position and written.position else []
        answer = await client.with_options(timeout=60).search(
            token, limit=5, mode=mode, min_positions=positions
        )
        searched = time.perf_counter()
        row = rows[mode]
        row["write"].append((wrote - started) * 1000)
        row["search"].append((searched - wrote) * 1000)
        row["waited"].append(float(answer.waited_ms))
        row["found"].append(float(any(token in r.content for r in answer.results)))
    return rows


def summary(samples: list[float]) -> str:
    if not samples:
        return "-"
    return (
        f"p50 {percentile(samples, 50):7.1f}  p95 {percentile(samples, 95):7.1f}  "
        f"max {max(samples):7.1f}"
    )


def report(title: str, rows: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n{title}")
    for mode, row in rows.items():
        found = row["found"]
        print(
            f"  {mode:8s} pairs {len(found):4d}  found at once {int(sum(found)):4d} "
            f"({100 * statistics.fmean(found) if found else 0:5.1f} %)"
        )
        print(f"    write ms          {summary(row['write'])}")
        print(f"    search ms         {summary(row['search'])}")
        print(f"    server waited ms  {summary(row['waited'])}")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="engram-ryw-bench-") as work:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "engram",
            "dev",
            "--port",
            str(port),
            "--data-dir",
            str(Path(work) / "data"),
        ]
        async with (
            server_process(command, server_env(), Path(work) / "server.log", port) as addr,
            AsyncClient(addr, space=SPACE) as client,
        ):
            # Warm-up: the first write loads the model's caches and the first search its.
            await pairs(client, count=4, cap=60, with_position=True)
            positioned = await pairs(
                client, count=args.pairs, cap=args.time_cap, with_position=True
            )
            bare = await pairs(client, count=args.pairs, cap=args.time_cap, with_position=False)
    report("search with the write's position (min_positions)", positioned)
    report("search without a position (immediately after the write)", bare)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--time-cap", type=float, default=180.0)
    asyncio.run(main(parser.parse_args()))
