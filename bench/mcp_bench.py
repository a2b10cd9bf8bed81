"""Hosted `engram mcp` against the direct WorkspaceService call (run by
`python bench/workspace_bench.py --mcp`, or on its own as `python bench/mcp_bench.py`).

It starts `engram dev --auth` (HS256 JWTs, workspace write limits raised so the bench is
counted but never refused) and one hosted `engram mcp --transport http --hosted` in front of
it, then measures at concurrency 1, interleaving the two paths call by call so drift on a
shared machine hits both alike:

- memory_write (a daily-log append): `EngramClient.memory_write` (gRPC) against the MCP tool
  `memory_write` called by the official SDK's client over streamable HTTP, same agent, same
  kind of entry;
- memory_search (limit 5, distinct queries): `EngramClient.memory_search` against the MCP
  tool, once the writes are indexed (so the MCP side waits for no write of its session);

and then throughput with `--agents` (50) concurrent agents, each with its own token, its own
space (/mcp/private/agent-<i>) and its own MCP session, each writing then searching in a loop
for `--seconds`. The MCP path's figures include the SDK client's own work (JSON-RPC over
HTTP), which runs in this process on the same cores as the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
from benchlib import bench_token, free_port, percentile
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from search_bench import server_env, server_process

from engram.client import EngramClient, Space

SECRET = "mcp-bench-secret-" + "0123456789abcdef" * 4
ISSUER = "https://id.example.com"
BENCH_WRITE_LIMIT = 10_000_000
WARMUP = 20


def token(subject: str) -> str:
    return bench_token(SECRET, sub=subject, tenant="acme", role="member")


@contextlib.asynccontextmanager
async def servers(workdir: Path) -> AsyncIterator[tuple[str, str]]:
    """`engram dev --auth` and a hosted `engram mcp`; yields (gRPC addr, MCP base URL)."""
    port, mcp_port = free_port(), free_port()
    env = {
        **server_env(),
        "ENGRAM_JWT_SECRET": SECRET,
        "ENGRAM_WORKSPACE_WRITES_PER_MINUTE": str(BENCH_WRITE_LIMIT),
        "ENGRAM_WORKSPACE_WRITES_PER_HOUR": str(BENCH_WRITE_LIMIT),
    }
    dev = [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port)]
    dev += ["--data-dir", str(workdir / "engram")]
    async with server_process(dev, env, workdir / "server.log", port) as addr:
        command = [sys.executable, "-m", "engram", "mcp", "--transport", "http", "--hosted"]
        command += ["--issuer", ISSUER, "--port", str(mcp_port), "--addr", addr]
        quiet = asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(*command, stdout=quiet, stderr=quiet)
        try:
            base = f"http://127.0.0.1:{mcp_port}"
            async with asyncio.timeout(120):
                while True:
                    try:
                        _, writer = await asyncio.open_connection("127.0.0.1", mcp_port)
                    except OSError:
                        await asyncio.sleep(0.2)
                        continue
                    writer.close()
                    await writer.wait_closed()
                    break
            yield addr, base
        finally:
            process.terminate()
            await process.wait()


@contextlib.asynccontextmanager
async def mcp_agent(url: str, bearer: str) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(60.0, read=300.0)
    headers = {"Authorization": f"Bearer {bearer}"}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def tool(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{name} failed: {result.content}")
    return result.structured_content


def row(name: str, values: list[float], elapsed: float | None = None) -> list[str]:
    rate = f"{len(values) / elapsed:.0f}" if elapsed else ""
    return [
        name,
        str(len(values)),
        f"{percentile(values, 50):.2f}",
        f"{percentile(values, 99):.2f}",
        rate,
    ]


async def paired(addr: str, base: str, count: int) -> list[list[str]]:
    """memory_write and memory_search, direct and over hosted MCP, interleaved."""
    bearer = token("bench-agent")
    space = Space("private", "paired")
    direct_write: list[float] = []
    mcp_write: list[float] = []
    direct_search: list[float] = []
    mcp_search: list[float] = []
    async with (
        EngramClient(addr, token=bearer, space=space) as direct,
        mcp_agent(f"{base}/mcp/private/paired", bearer) as hosted,
    ):
        for i in range(WARMUP + count):
            entry = f"Entry {i}: the review of batch {i * 31} moved to room {i % 17}."
            spent = {}
            # Which path goes first alternates, so neither always follows the other's write.
            for path in ("direct", "mcp") if i % 2 else ("mcp", "direct"):
                started = time.perf_counter()
                if path == "direct":
                    await direct.memory_write(entry)
                else:
                    await tool(hosted, "memory_write", {"content": entry + " (mcp)"})
                spent[path] = (time.perf_counter() - started) * 1000
            if i >= WARMUP:
                direct_write.append(spent["direct"])
                mcp_write.append(spent["mcp"])
        # Searches that wait for the session's writes until none is pending (bounded).
        waited = 0
        for _ in range(60):
            caught_up = await tool(hosted, "memory_search", {"query": "review of batch"})
            waited += caught_up["waited_ms"]
            if caught_up["writes_pending"] == 0 and caught_up["waited_ms"] == 0:
                break
        print(f"(the writes were indexed after waits of {waited} ms in all)")
        for i in range(WARMUP + count):
            # Two distinct queries per round (each embeds: no query-cache hit), swapped
            # between the paths every round.
            queries = [
                f"when did batch {i * 31} move to room {i % 17}?",
                f"which room took batch {i * 31} after review {i}?",
            ]
            if i % 2:
                queries.reverse()
            spent = {}
            for path, query in zip(("direct", "mcp"), queries, strict=True):
                started = time.perf_counter()
                if path == "direct":
                    await direct.memory_search(query)
                else:
                    found = await tool(hosted, "memory_search", {"query": query})
                    assert found["waited_ms"] == 0
                spent[path] = (time.perf_counter() - started) * 1000
            if i >= WARMUP:
                direct_search.append(spent["direct"])
                mcp_search.append(spent["mcp"])
    return [
        row("memory_write, direct (EngramClient)", direct_write),
        row("memory_write, hosted MCP", mcp_write),
        row("memory_search, direct (EngramClient)", direct_search),
        row("memory_search, hosted MCP", mcp_search),
    ]


async def agents(base: str, count: int, seconds: float) -> list[list[str]]:
    """`count` agents, each its own token, space and session, writing then searching."""
    writes: list[float] = []
    searches: list[float] = []
    deadline = 0.0

    async def agent(n: int) -> None:
        url = f"{base}/mcp/private/agent-{n}"
        async with mcp_agent(url, token(f"agent-{n}")) as client:
            await ready.wait()
            i = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await tool(client, "memory_write", {"content": f"Agent {n} note {i}."})
                middle = time.perf_counter()
                await tool(client, "memory_search", {"query": f"note {i} of agent {n}"})
                searches.append((time.perf_counter() - middle) * 1000)
                writes.append((middle - started) * 1000)
                i += 1

    ready = asyncio.Event()
    tasks = [asyncio.create_task(agent(n)) for n in range(count)]
    await asyncio.sleep(min(30.0, 2 + count * 0.2))  # the sessions open
    started = time.perf_counter()
    deadline = started + seconds
    ready.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    return [
        row(f"memory_write, {count} agents", writes, elapsed),
        row(f"memory_search, {count} agents (each waits for its own write)", searches, elapsed),
    ]


async def run(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="engram-mcp-bench-") as tmp:
        async with servers(Path(tmp)) as (addr, base):
            rows = await paired(addr, base, args.count)
            rows += await agents(base, args.agents, args.seconds)
    load_after = os.getloadavg()
    print(
        f"\n{started:%Y-%m-%d %H:%M} UTC, {args.count} interleaved calls per row, "
        f"{args.agents} agents for {args.seconds:.0f} s; load average (1 min) "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after\n"
    )
    print("| path | calls | p50 ms | p99 ms | calls/s |")
    print("|---|---|---|---|---|")
    for values in rows:
        print("| " + " | ".join(values) + " |")
    print("\ntarget: hosted MCP adds <= 2 ms p50 to memory_write and memory_search")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=300, help="interleaved calls per row")
    parser.add_argument("--agents", type=int, default=50, help="concurrent agents")
    parser.add_argument("--seconds", type=float, default=30.0, help="the agents' run")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    arguments(cli)
    asyncio.run(run(cli.parse_args()))
