"""Helpers the benchmark scripts share (each script runs as `python bench/<name>.py`, which
puts this directory on the import path)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any


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


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, `q` in 0..100."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def load_launcher() -> Any:
    """deploy/local/backends.py as a module (it is a script, not part of the package)."""
    root = Path(__file__).resolve().parents[1]
    name = "engram_local_backends"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, root / "deploy/local/backends.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def bench_token(secret: str, **claims: Any) -> str:
    """An HS256 token valid for a day, for servers started with `secret`."""
    import jwt

    return jwt.encode({"exp": int(time.time() + 24 * 3600), **claims}, secret, algorithm="HS256")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def new_events_consumer(nats_url: str, durable: str) -> None:
    """Creates the run's durable consumer from the stream's end, before anything is written:
    shared NATS servers hold other runs' events, which this run must not spend time on."""
    import nats
    from nats.js.api import DeliverPolicy

    from engram.app.config import Components
    from engram.indexer.jetstream_consumer import consumer_config, ensure_streams
    from engram.runtime.settings import Settings

    settings = Settings(nats_url=nats_url, indexer_durable=durable)
    connection = await nats.connect(nats_url)
    try:
        await ensure_streams(connection)
        config = consumer_config(Components.from_settings(settings).consumer)
        config.deliver_policy = DeliverPolicy.NEW
        await connection.jetstream().add_consumer("ENGRAM_DOCS", config=config)
    finally:
        await connection.close()


# ghz, the compiled gRPC load generator the storage and search benches drive servers with (a
# Python client would take as much CPU as the server it measures on 2 cores).
GHZ_VERSION = "v0.120.0"
GHZ = Path.home() / ".cache" / "engram" / "bin" / "ghz"


def ensure_ghz() -> Path | None:
    """ghz, built with the Go toolchain from the Go module proxy on first use (cached in
    ~/.cache/engram/bin); None without Go."""
    if GHZ.exists():
        return GHZ
    go = shutil.which("go")
    if go is None:
        return None
    GHZ.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [go, "install", f"github.com/bojand/ghz/cmd/ghz@{GHZ_VERSION}"],
        env={**os.environ, "GOBIN": str(GHZ.parent)},
        check=True,
    )
    return GHZ
