"""Hosted `engram mcp` against the direct WorkspaceService call (run by
`python bench/workspace_bench.py --mcp`, or on its own as `python bench/mcp_bench.py`).

It starts `engram dev --auth` (HS256 JWTs, workspace write limits raised so the bench is
counted but never refused) and one hosted `engram mcp --transport http --hosted` in front of
it (with `--baseline DIR`, a second one from another checkout, e.g. a `git worktree` of
main: before and after a change, in one run), then measures at concurrency 1, interleaving
every path call by call (the order rotating) so drift on a shared machine hits all alike:

- memory_write (a daily-log append): `EngramClient.memory_write` (gRPC) against the MCP tool
  `memory_write` called by the official SDK's client over streamable HTTP, and as plain
  JSON-RPC POSTs (no SDK: the server's side plus one HTTP exchange), in one 2025-11-25
  session and sessionless at 2026-07-28;
- memory_search (limit 5, distinct queries): the same paths, once the writes are indexed
  (so the MCP side waits for no write of its session);

and the MCP process's CPU per call (user + system, /proc), which a loaded machine inflates
less than it does latency. Then throughput with `--agents` (50) concurrent agents, each with
its own token, its own space (/mcp/private/agent-<i>) and its own MCP session, each writing
then searching in a loop for `--seconds`. Every client runs in this process, on the same
two cores as the servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
from benchlib import bench_token, free_port, percentile, process_cpu
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from search_bench import ROOT, server_env, server_process

from engram.client import EngramClient, Space

SECRET = "mcp-bench-secret-" + "0123456789abcdef" * 4
ISSUER = "https://id.example.com"
BENCH_WRITE_LIMIT = 10_000_000
WARMUP = 20


def token(subject: str) -> str:
    return bench_token(SECRET, sub=subject, tenant="acme", role="member")


@contextlib.asynccontextmanager
async def hosted_mcp(addr: str, tree: Path | None = None) -> AsyncIterator[tuple[str, int]]:
    """One hosted `engram mcp` in front of `addr`, from this checkout or from another
    checkout's `tree` (its services/ on PYTHONPATH: the "before" of a change); yields (base
    URL, pid)."""
    port = free_port()
    env = dict(os.environ)
    # This checkout's server unless `tree` is given: without it on PYTHONPATH, `python -m
    # engram` imports whichever engram the venv has installed (the main checkout's).
    tree = tree or ROOT
    env["PYTHONPATH"] = f"{tree / 'services'}{os.pathsep}{tree}"
    command = [sys.executable, "-m", "engram", "mcp", "--transport", "http", "--hosted"]
    command += ["--issuer", ISSUER, "--port", str(port), "--addr", addr]
    quiet = asyncio.subprocess.DEVNULL
    process = await asyncio.create_subprocess_exec(*command, env=env, stdout=quiet, stderr=quiet)
    try:
        async with asyncio.timeout(120):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.2)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        await process.wait()


@contextlib.asynccontextmanager
async def servers(workdir: Path) -> AsyncIterator[str]:
    """`engram dev --auth` (write limits raised); yields its gRPC address."""
    port = free_port()
    env = {
        **server_env(),
        "ENGRAM_JWT_SECRET": SECRET,
        "ENGRAM_WORKSPACE_WRITES_PER_MINUTE": str(BENCH_WRITE_LIMIT),
        "ENGRAM_WORKSPACE_WRITES_PER_HOUR": str(BENCH_WRITE_LIMIT),
    }
    dev = [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port)]
    dev += ["--data-dir", str(workdir / "engram")]
    async with server_process(dev, env, workdir / "server.log", port) as addr:
        yield addr


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


class PlainAgent:
    """An MCP client reduced to its HTTP requests: one session (initialize, then each
    tools/call a JSON-RPC POST), no SDK. What it measures is the server's side of a call
    plus one HTTP exchange, without the SDK client's own work in this process."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url
        self._ids = itertools.count(1)

    async def open(self) -> None:
        version = LATEST_HANDSHAKE_VERSION
        opened = await self._http.post(
            self._url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "mcp-bench", "version": "1"},
                },
            },
        )
        opened.raise_for_status()
        self._http.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        self._http.headers["mcp-protocol-version"] = version
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        (await self._http.post(self._url, json=initialized)).raise_for_status()

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        message = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        answer = (await self._http.post(self._url, json=message)).json()
        result = answer.get("result") or {}
        if result.get("isError") or "structuredContent" not in result:
            raise RuntimeError(f"{name} failed: {answer}")
        structured: dict[str, Any] = result["structuredContent"]
        return structured


class SessionlessAgent:
    """The same at the sessionless 2026-07-28 revision: no initialize, each tools/call one
    self-contained POST (its envelope in `_meta`, the routing headers beside it)."""

    VERSION = "2026-07-28"

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url
        self._ids = itertools.count(1)
        http.headers["mcp-protocol-version"] = self.VERSION
        http.headers["mcp-method"] = "tools/call"

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": self.VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        message = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta},
        }
        response = await self._http.post(self._url, json=message, headers={"mcp-name": name})
        result = response.json().get("result") or {}
        if result.get("isError") or "structuredContent" not in result:
            raise RuntimeError(f"{name} failed: {response.text}")
        structured: dict[str, Any] = result["structuredContent"]
        return structured


@contextlib.asynccontextmanager
async def sessionless_agent(url: str, bearer: str) -> AsyncIterator[SessionlessAgent]:
    headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        yield SessionlessAgent(http, url)


@contextlib.asynccontextmanager
async def plain_agent(url: str, bearer: str) -> AsyncIterator[PlainAgent]:
    headers = {
        "Authorization": f"Bearer {bearer}",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        agent = PlainAgent(http, url)
        await agent.open()
        yield agent


def row(name: str, values: list[float], elapsed: float | None = None, cpu: str = "") -> list[str]:
    rate = f"{len(values) / elapsed:.0f}" if elapsed else ""
    return [
        name,
        str(len(values)),
        f"{percentile(values, 50):.2f}",
        f"{percentile(values, 99):.2f}",
        rate,
        cpu,
    ]


Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class Caller:
    """One way of calling the tools, its latencies per tool, and the MCP process it loads."""

    label: str
    call: Call
    pid: int | None = None
    times: dict[str, list[float]] = field(default_factory=lambda: {TOOLS[0]: [], TOOLS[1]: []})


TOOLS = ("memory_write", "memory_search")


async def interleave(paths: list[Caller], count: int, tool_name: str) -> dict[int, float]:
    """`count` (+ warm-up) rounds of `tool_name` over every path, the order rotating each
    round so none always follows another; returns each MCP process's CPU ms per call."""
    pids = {path.pid for path in paths if path.pid is not None}
    calls = dict.fromkeys(pids, 0)
    cpu = {pid: process_cpu(pid) for pid in pids}
    for i in range(WARMUP + count):
        shift = i % len(paths)
        for n, path in enumerate(paths[shift:] + paths[:shift]):
            if tool_name == "memory_write":
                arguments = {
                    "content": f"Entry {i}.{n}: the review of batch {i * 31} moved to "
                    f"room {i % 17}."
                }
            else:  # a distinct query per call: each embeds (no query-cache hit)
                arguments = {"query": f"when did batch {i * 31} move to room {i % 17}, {n}?"}
            started = time.perf_counter()
            found = await path.call(tool_name, arguments)
            spent = (time.perf_counter() - started) * 1000
            if tool_name == "memory_search" and found.get("waited_ms"):
                raise RuntimeError("a search waited for writes: the paired rows must not")
            if path.pid is not None:
                calls[path.pid] += 1
            if i >= WARMUP:
                path.times[tool_name].append(spent)
    return {pid: (process_cpu(pid) - cpu[pid]) * 1000 / calls[pid] for pid in pids}


async def paired(addr: str, hosted: list[tuple[str, str, int]], count: int) -> list[list[str]]:
    """memory_write and memory_search, direct and over each hosted MCP server (`hosted`:
    label, base URL, pid), through the SDK's client and as plain JSON-RPC POSTs,
    interleaved call by call."""
    bearer = token("bench-agent")
    space = Space("private", "paired")
    async with contextlib.AsyncExitStack() as stack:
        direct = await stack.enter_async_context(EngramClient(addr, token=bearer, space=space))

        async def direct_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            if name == "memory_write":
                await direct.memory_write(arguments["content"])
                return {}
            await direct.memory_search(arguments["query"])
            return {}

        paths = [Caller("direct (EngramClient)", direct_call)]
        for label, base, pid in hosted:
            url = f"{base}/mcp/private/paired"
            sdk = await stack.enter_async_context(mcp_agent(url, bearer))
            plain = await stack.enter_async_context(plain_agent(url, bearer))
            paths.append(Caller(f"{label}, SDK client", functools.partial(tool, sdk), pid))
            bare = await stack.enter_async_context(sessionless_agent(url, bearer))
            paths.append(Caller(f"{label}, plain JSON-RPC POST", plain.call, pid))
            paths.append(Caller(f"{label}, plain POST, 2026-07-28", bare.call, pid))
        cpu_write = await interleave(paths, count, "memory_write")
        # Searches that wait for each session's writes until none is pending (bounded).
        waited = 0
        for path in paths[1:]:
            for _ in range(60):
                caught_up = await path.call("memory_search", {"query": "review of batch"})
                waited += caught_up["waited_ms"]
                if caught_up["writes_pending"] == 0 and caught_up["waited_ms"] == 0:
                    break
        print(f"(the writes were indexed after waits of {waited} ms in all)")
        cpu_search = await interleave(paths, count, "memory_search")
    rows = []
    for tool_name, cpu in (("memory_write", cpu_write), ("memory_search", cpu_search)):
        for path in paths:
            used = f"{cpu[path.pid]:.2f}" if path.pid in cpu else ""
            rows.append(row(f"{tool_name}, {path.label}", path.times[tool_name], cpu=used))
    return rows


async def agents(base: str, pid: int, count: int, seconds: float) -> list[list[str]]:
    """`count` agents, each its own token, space and session (plain JSON-RPC POSTs, so that
    50 SDK clients do not take this machine's two cores from the servers), writing then
    searching; the search waits for the agent's own write (read your writes)."""
    writes: list[float] = []
    searches: list[float] = []
    deadline = 0.0

    async def agent(n: int) -> None:
        url = f"{base}/mcp/private/agent-{n}"
        async with plain_agent(url, token(f"agent-{n}")) as client:
            await ready.wait()
            i = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await client.call("memory_write", {"content": f"Agent {n} note {i}."})
                middle = time.perf_counter()
                await client.call("memory_search", {"query": f"note {i} of agent {n}"})
                searches.append((time.perf_counter() - middle) * 1000)
                writes.append((middle - started) * 1000)
                i += 1

    ready = asyncio.Event()
    tasks = [asyncio.create_task(agent(n)) for n in range(count)]
    await asyncio.sleep(min(30.0, 2 + count * 0.2))  # the sessions open
    cpu = process_cpu(pid)
    started = time.perf_counter()
    deadline = started + seconds
    ready.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    used = f"{(process_cpu(pid) - cpu) * 1000 / max(1, len(writes) + len(searches)):.2f}"
    return [
        row(f"memory_write, {count} agents", writes, elapsed, cpu=used),
        row(f"memory_search, {count} agents (each waits for its own write)", searches, elapsed),
    ]


async def run(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="engram-mcp-bench-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            addr = await stack.enter_async_context(servers(Path(tmp)))
            base, pid = await stack.enter_async_context(hosted_mcp(addr))
            hosted = [("hosted MCP", base, pid)]
            if args.baseline:
                before = await stack.enter_async_context(hosted_mcp(addr, args.baseline))
                hosted.append((f"hosted MCP before ({args.baseline.name})", *before))
            rows = await paired(addr, hosted, args.count)
            if args.agents:
                rows += await agents(base, pid, args.agents, args.seconds)
    load_after = os.getloadavg()
    print(
        f"\n{started:%Y-%m-%d %H:%M} UTC, {args.count} interleaved calls per row, "
        f"{args.agents} agents for {args.seconds:.0f} s; load average (1 min) "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after\n"
    )
    print("| path | calls | p50 ms | p99 ms | calls/s | MCP process CPU ms/call |")
    print("|---|---|---|---|---|---|")
    for values in rows:
        print("| " + " | ".join(values) + " |")
    print("\ntarget: hosted MCP adds <= 2 ms p50 to memory_write and memory_search")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=300, help="interleaved calls per row")
    parser.add_argument("--agents", type=int, default=50, help="concurrent agents (0: none)")
    parser.add_argument("--seconds", type=float, default=30.0, help="the agents' run")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. a `git worktree` of main) whose hosted engram mcp is "
        "measured in the same run, interleaved: before and after a change",
    )


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    arguments(cli)
    asyncio.run(run(cli.parse_args()))
