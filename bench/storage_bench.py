"""Storage benchmark: write/read latency at concurrency 1 and throughput at concurrency 16.

    python bench/storage_bench.py                   # starts `engram dev` (embedded backends)
    python bench/storage_bench.py --target real     # NATS + FerretDB + `engram serve storage`
    python bench/storage_bench.py --target real --mongo-transport tcp   # FerretDB over TCP
    python bench/storage_bench.py --target real --count-commands   # + Mongo commands per op
    python bench/storage_bench.py --addr HOST:PORT [--token T]   # a server already running

Load comes from ghz (a compiled gRPC load generator, built once with `go install` into
~/.cache/engram/bin) so that on a 2-core machine the client does not eat the server's CPU;
`--client python` uses the asyncio client instead. Every loop is bounded by a count and a
time cap. With the server started here, each phase also reports the CPU time each process
spent per operation (server, the Mongo backend: FerretDB with its PostgreSQL, NATS; psutil,
children included). On the real target the storage service reaches FerretDB over its unix
socket (`--mongo-transport tcp`: over 127.0.0.1). Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib.util
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import psutil
from benchlib import GHZ, closed_loop, ensure_ghz, free_port, spawn

from engram.client import AsyncClient, Space

ROOT = Path(__file__).resolve().parents[1]
SPACE = Space(name="bench")
BODY = "# Daily note\n\n" + "The agent remembered something useful about the user. " * 8


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class CpuMeter:
    """CPU seconds (user + system, children included) of named process trees; with
    `commands`, also the Mongo commands the server sent (bench/mongo_command_counter.py)."""

    def __init__(self, roots: dict[str, int], commands: Path | None = None) -> None:
        self._roots = roots
        self._commands = commands
        self._counts: collections.Counter[str] = collections.Counter()
        # (phase, Mongo commands per operation) for each measured phase, when counting.
        self.notes: list[tuple[str, str]] = []

    def _read_commands(self) -> collections.Counter[str]:
        """Asks the server for its command counts (SIGUSR1) and reads them (bounded)."""
        assert self._commands is not None
        before = self._commands.stat().st_mtime_ns if self._commands.exists() else 0
        os.kill(self._roots["server"], signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._commands.exists() and self._commands.stat().st_mtime_ns != before:
                return collections.Counter(json.loads(self._commands.read_text()))
            time.sleep(0.05)
        raise SystemExit("the server did not report its Mongo command counts")

    def sample(self) -> dict[str, float]:
        if self._commands is not None:
            # Lets the relay finish the previous phase's events first.
            time.sleep(1.5)
            self._counts = self._read_commands()
        totals: dict[str, float] = {}
        for name, pid in self._roots.items():
            total = 0.0
            try:
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                tree = []
            for process in tree:
                try:
                    times = process.cpu_times()
                except psutil.NoSuchProcess:
                    continue  # exited meanwhile
                total += times.user + times.system
            totals[name] = total
        return totals

    def commands_per_op(self, phase: str, before: collections.Counter[str], ops: int) -> None:
        """Notes the Mongo commands per operation since `before` (a copy of `counts`)."""
        if self._commands is None:
            return
        sent = self._counts - before
        top = ", ".join(
            f"{name} {count / max(ops, 1):.2f}" for name, count in sent.most_common() if count
        )
        self.notes.append((phase, f"{sum(sent.values()) / max(ops, 1):.2f} ({top})"))

    @property
    def counts(self) -> collections.Counter[str]:
        return collections.Counter(self._counts)

    @staticmethod
    def per_op(before: dict[str, float], after: dict[str, float], ops: int) -> str:
        return ", ".join(
            f"{name} {(after[name] - before[name]) * 1000 / max(ops, 1):.2f}" for name in before
        )


@contextlib.asynccontextmanager
async def started_server(
    target: str, workdir: Path, *, mongo_transport: str = "unix", count_commands: bool = False
) -> AsyncIterator[tuple[str, str, CpuMeter]]:
    """Starts the server under test; yields (addr, token, CPU meter of its processes)."""
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "false",
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    token = ""
    backends = None
    if target == "embedded":
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
    else:
        spec = importlib.util.spec_from_file_location("backends", ROOT / "deploy/local/backends.py")
        assert spec and spec.loader
        launcher = importlib.util.module_from_spec(spec)
        sys.modules["backends"] = launcher
        spec.loader.exec_module(launcher)
        launcher.provision(["nats", "mongo"])
        backends = [launcher.start_nats(workdir / "nats"), launcher.start_mongo(workdir / "mongo")]
        import jwt

        secret = "bench-secret-0123456789abcdef0123456789abcdef"
        token = jwt.encode(
            {"sub": "bench", "tenant": "bench", "role": "member", "exp": int(time.time()) + 3600},
            secret,
            algorithm="HS256",
        )
        mongo_uri = backends[1].url
        if mongo_transport == "unix":
            mongo_uri = backends[1].extra.get("unix_url", mongo_uri)
        env.update(
            ENGRAM_NATS_URL=backends[0].url,
            ENGRAM_MONGO_URI=mongo_uri,
            ENGRAM_JWT_SECRET=secret,
        )
        command = [sys.executable, "-m", "engram", "serve", "storage", "--port", str(port)]
        if count_commands:
            env["ENGRAM_BENCH_COMMAND_COUNTS"] = str(workdir / "commands.json")
            command[1:3] = [str(ROOT / "bench" / "mongo_command_counter.py")]
    process = await asyncio.to_thread(spawn, command, env, workdir / "server.log")
    roots = {"server": process.pid}
    if backends:
        roots.update(mongo=backends[1].pid, nats=backends[0].pid)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
        counts = workdir / "commands.json" if count_commands and backends else None
        yield f"127.0.0.1:{port}", token, CpuMeter(roots, counts)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        for backend in backends or []:
            backend.stop()


async def run(
    addr: str, token: str, *, count: int, time_cap: float, meter: CpuMeter | None = None
) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    async with AsyncClient(addr, token=token, space=SPACE) as client:
        run_id = f"{time.time_ns():x}"
        # Every write's content is new: a phase that rewrote an earlier phase's content
        # would be skipped by the service as unchanged and measure reads, not writes.
        written = itertools.count()

        def writer(prefix: str) -> Callable[[int], Awaitable[object]]:
            async def write(i: int) -> object:
                return await client.write_document(
                    f"{run_id}/{prefix}/{i % 500:04d}.md", f"{BODY}\nrevision {next(written)}\n"
                )

            return write

        async def read(i: int) -> object:
            return await client.read_document(f"{run_id}/c1/{i % 500:04d}.md")

        for _ in range(50):  # warm up connections and caches
            await writer("warm")(_)
        for label, operation in (("write", writer("c1")), ("read", read)):
            for concurrency in (1, 16):
                before = meter.sample() if meter else {}
                sent = meter.counts if meter else collections.Counter()
                latencies, elapsed = await closed_loop(
                    operation, count=count, concurrency=concurrency, cap=time_cap
                )
                done = len(latencies)
                cpu = CpuMeter.per_op(before, meter.sample(), done) if meter else "-"
                if meter:
                    meter.commands_per_op(f"{label} c{concurrency}", sent, done)
                rows.append(
                    (
                        label,
                        str(concurrency),
                        str(done),
                        f"{statistics.median(latencies):.2f}",
                        f"{percentile(latencies, 99):.2f}",
                        f"{done / elapsed:,.0f}",
                        cpu,
                    )
                )
    return rows


def ghz_phase(
    ghz: Path,
    addr: str,
    token: str,
    method: str,
    data: dict[str, object],
    *,
    count: int,
    concurrency: int,
    time_cap: float,
    meter: CpuMeter | None = None,
) -> tuple[str, ...]:
    """One phase with ghz; returns a result row."""
    command = [
        str(ghz),
        "--insecure",
        "--proto",
        str(ROOT / "protos/engram/v1/storage.proto"),
        "--import-paths",
        str(ROOT / "protos"),
        "--call",
        f"engram.v1.StorageService.{method}",
        "-d",
        json.dumps(data),
        "-c",
        str(concurrency),
        "-n",
        str(count),
        "--format",
        "json",
        addr,
    ]
    if token:
        command[1:1] = ["--metadata", json.dumps({"authorization": f"Bearer {token}"})]
    # The count bounds the phase, and so does the time cap (ghz's -z would override -n).
    before = meter.sample() if meter else {}
    sent = meter.counts if meter else collections.Counter()
    completed = subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=time_cap * 4
    )
    report = json.loads(completed.stdout)
    codes = report.get("statusCodeDistribution", {})
    if set(codes) != {"OK"}:
        raise SystemExit(f"{method} failed: {codes} {report.get('errorDistribution')}")
    latency = {p["percentage"]: p["latency"] / 1e6 for p in report["latencyDistribution"]}
    done = int(report["count"])
    cpu = CpuMeter.per_op(before, meter.sample(), done) if meter else "-"
    if meter:
        meter.commands_per_op(f"{method} c{concurrency}", sent, done)
    return (
        method.replace("Document", "").lower(),
        str(concurrency),
        str(done),
        f"{latency[50]:.2f}",
        f"{latency[99]:.2f}",
        f"{report['rps']:,.0f}",
        cpu,
    )


def run_ghz(
    ghz: Path,
    addr: str,
    token: str,
    *,
    count: int,
    time_cap: float,
    meter: CpuMeter | None = None,
) -> list[tuple[str, ...]]:
    run_id = f"{time.time_ns():x}"
    space = {"visibility": "VISIBILITY_PRIVATE", "name": "bench"}
    rows = []
    warm = {
        "space": space,
        "path": f"{run_id}/warm/{{{{mod .RequestNumber 50}}}}.md",
        "content": BODY,
    }
    ghz_phase(ghz, addr, token, "WriteDocument", warm, count=100, concurrency=4, time_cap=10)
    for concurrency in (1, 16):
        write = {
            "space": space,
            "path": f"{run_id}/c{concurrency}/{{{{mod .RequestNumber 500}}}}.md",
            "content": BODY + "\nrevision {{.RequestNumber}}\n",
        }
        rows.append(
            ghz_phase(
                ghz,
                addr,
                token,
                "WriteDocument",
                write,
                count=count,
                concurrency=concurrency,
                time_cap=time_cap,
                meter=meter,
            )
        )
    for concurrency in (1, 16):
        read = {"space": space, "path": f"{run_id}/c1/{{{{mod .RequestNumber 500}}}}.md"}
        rows.append(
            ghz_phase(
                ghz,
                addr,
                token,
                "ReadDocument",
                read,
                count=count,
                concurrency=concurrency,
                time_cap=time_cap,
                meter=meter,
            )
        )
    return rows


async def measure(
    args: argparse.Namespace, addr: str, token: str, meter: CpuMeter | None = None
) -> list[tuple[str, ...]]:
    ghz = ensure_ghz() if args.client == "ghz" else None
    if ghz is not None:
        return await asyncio.to_thread(
            run_ghz, ghz, addr, token, count=args.count, time_cap=args.time_cap, meter=meter
        )
    return await run(addr, token, count=args.count, time_cap=args.time_cap, meter=meter)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=("embedded", "real"), default="embedded")
    parser.add_argument("--addr", help="benchmark an already running server instead")
    parser.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN", ""))
    parser.add_argument("--count", type=int, default=2000, help="operations per phase")
    parser.add_argument("--time-cap", type=float, default=30.0, help="seconds per phase")
    parser.add_argument(
        "--client",
        choices=("ghz", "python"),
        default="ghz",
        help="load generator (ghz falls back to python without Go)",
    )
    parser.add_argument(
        "--mongo-transport",
        choices=("unix", "tcp"),
        default="unix",
        help="how the storage service reaches FerretDB on the real target",
    )
    parser.add_argument(
        "--count-commands",
        action="store_true",
        help="real target: count the Mongo commands the server sends per operation",
    )
    args = parser.parse_args()
    notes: list[tuple[str, str]] = []
    if args.addr:
        rows = await measure(args, args.addr, args.token)
        target = args.addr
    else:
        with tempfile.TemporaryDirectory(prefix="engram-bench-") as workdir:
            async with started_server(
                args.target,
                Path(workdir),
                mongo_transport=args.mongo_transport,
                count_commands=args.count_commands,
            ) as (addr, token, meter):
                rows = await measure(args, addr, token, meter)
                notes = meter.notes
        target = args.target
        if args.target == "real":
            target += f" (FerretDB over {args.mongo_transport})"
    client = "ghz" if args.client == "ghz" and GHZ.exists() else "python asyncio"
    print(f"storage bench against {target} ({os.cpu_count()} cores, load from {client})")
    header = ("op", "concurrency", "ops", "p50 ms", "p99 ms", "ops/s", "CPU ms per op")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    for phase, commands in notes:
        print(f"Mongo commands per op, {phase}: {commands}")


if __name__ == "__main__":
    asyncio.run(main())
