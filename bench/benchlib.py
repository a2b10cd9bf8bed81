"""Helpers the benchmark scripts share (each script runs as `python bench/<name>.py`, which
puts this directory on the import path)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Starts `command` with its output appended to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


async def closed_loop(
    operation: Callable[[int], Awaitable[object]], *, count: int, concurrency: int, cap: float
) -> tuple[list[float], float]:
    """Runs up to `count` operations (index i once each) at `concurrency`, for at most `cap`
    seconds; returns (latencies in ms, elapsed seconds)."""
    latencies: list[float] = []
    next_index = 0
    deadline = time.perf_counter() + cap

    async def worker() -> None:
        nonlocal next_index
        while next_index < count and time.perf_counter() < deadline:
            index = next_index
            next_index += 1
            started = time.perf_counter()
            await operation(index)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started
