"""Imports against `engram dev --auth` in a subprocess: the attack archives of issue 13 and a
valid 100 MiB import. For each: the outcome, the server's CPU time, its peak RSS growth (peak
reset through /proc/<pid>/clear_refs before the call) and the latency of health checks sent
every 10 ms while the import runs.

With `--repeat N` (issue 29) each refusal is sent N times in a row instead, and the
server's RSS after each call is printed: the curve shows memory that accumulates across
refusals, which a single call cannot. The refusals are those of
tests/load/test_repeated_refusals.py: every attack archive, the 300 x 1 MiB bomb, a
credential after 64 MiB, an import into another tenant's space, an import over the project
quota (8 MiB here), a WriteDocument over ENGRAM_MAX_DOC_BYTES or carrying a credential, and
an export of a 16 MiB space cut off after its first message. `--only NAME` (repeatable)
keeps some of them.

    .venv/bin/python bench/import_bench.py [--valid-mib 100] [--repeat 20] [--only bomb_300x1mib]

Every engram call goes through engram.client, once (retries off: each refusal is sent exactly
as many times as counted). Imports go through the blocking `Client`, whose iterable source is
sent piece by piece as given, on grpc's blocking channel (see `run_import`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc
from benchlib import free_port, spawn
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engram.client import AsyncClient, Client, EngramError, Space, status_name  # noqa: E402
from tests.support import hostile_archives  # noqa: E402
from tests.support.tokens import TEST_JWT_SECRET, mint  # noqa: E402

MIB = 1024 * 1024
MEMBER = mint("ann", "acme", "member")
VIEWER_OF_OTHER = mint("eve", "globex", "viewer")
TICKS = os.sysconf("SC_CLK_TCK")
PROJECT_QUOTA = 8 * MIB
EXPORTED = Space(visibility="private", name="exported")


class Server:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(field)

    def reset_peak(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


def outcome(error: EngramError) -> str:
    """`CODE: details`, as the call ended. A failure engram did not shape reads
    "<call> failed: CODE: details" in the client; only its details are shown."""
    code = status_name(error)
    details = error.message.partition(f" failed: {code}: ")[2] or error.message
    return f"{code}: {details[:70]}"


def run_import(port: int, pieces: Sequence[bytes], token: str, space: Space) -> str:
    """Through the blocking client (run in a thread), on grpc's blocking channel: the aio
    channel may report a server that ends a client stream early as INTERNAL "Internal error
    from Core" (grpc/grpc#36066). Each piece is one message, as given."""
    with Client(
        f"127.0.0.1:{port}", token=token, space=space, retries=0, stream_timeout=600
    ) as client:
        try:
            result = client.import_space(pieces, strategy="overwrite")
        except EngramError as error:
            return outcome(error)
    return f"OK: {result.written} documents, {result.bytes / MIB:.1f} MiB"


async def measure(
    server: Server,
    channel: grpc.aio.Channel,
    port: int,
    name: str,
    pieces: Sequence[bytes],
    token: str = MEMBER,
    space: Space | None = None,
) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    await health.Check(health_pb2.HealthCheckRequest())
    rss = server.status("VmRSS")
    server.reset_peak()
    cpu = server.cpu_seconds()
    started = time.perf_counter()
    work = asyncio.create_task(
        asyncio.to_thread(
            run_import,
            port,
            pieces,
            token,
            space or Space(visibility="private", name=name),
        )
    )
    latencies: list[float] = []
    while not work.done():
        sent = time.perf_counter()
        await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
        latencies.append((time.perf_counter() - sent) * 1000)
        await asyncio.sleep(0.01)
    outcome = await work
    elapsed = time.perf_counter() - started
    cpu = server.cpu_seconds() - cpu
    growth = (server.status("VmHWM") - rss) / MIB
    sent_mib = sum(len(p) for p in pieces) / MIB
    print(
        f"{name:26} {outcome[:64]:64} wall {elapsed:6.2f} s  server cpu {cpu:5.2f} s  "
        f"peak RSS +{growth:6.1f} MiB  health n={len(latencies)} "
        f"p50 {statistics.median(latencies):5.1f} ms max {max(latencies):6.1f} ms  "
        f"(sent {sent_mib:.1f} MiB)",
        flush=True,
    )


Send = Callable[[], Awaitable[str]]


def refused_import(
    port: int,
    name: str,
    pieces: Sequence[bytes],
    token: str = MEMBER,
    space: Space | None = None,
) -> Send:
    target = space or Space(visibility="private", name=name)
    return lambda: asyncio.to_thread(run_import, port, pieces, token, target)


def refused_write(port: int, name: str, content: str) -> Send:
    async def send() -> str:
        # The client's channel sends messages up to 16 MiB, as this bench's did.
        async with AsyncClient(
            f"127.0.0.1:{port}",
            token=MEMBER,
            space=Space(visibility="private", name=name),
            retries=0,
            timeout=60,
        ) as client:
            try:
                await client.write_document("big.md", content)
            except EngramError as error:
                return outcome(error)
        return "OK"

    return send


def cut_off_export(port: int) -> Send:
    async def send() -> str:
        async with AsyncClient(
            f"127.0.0.1:{port}", token=MEMBER, space=EXPORTED, retries=0, stream_timeout=60
        ) as client:
            chunks = client.export_chunks()
            first = await anext(chunks, b"")
            # Closing the iterator cancels the call (and closing the client, its channel).
            await chunks.aclose()
        return f"CANCELLED after {len(first)} bytes"

    return send


def refusals(port: int, attacks: dict[str, list[bytes]]) -> dict[str, Send]:
    """Every refusal of tests/load/test_repeated_refusals.py, by name."""
    cases = {name: refused_import(port, name, pieces) for name, pieces in attacks.items()}
    cases["import_forbidden_space"] = refused_import(
        port,
        "forbidden",
        list(hostile_archives.repeated(b"\x1f", 16 * MIB)),
        VIEWER_OF_OTHER,
        Space(visibility="org", tenant="acme", name="plans"),
    )
    cases["import_over_quota"] = refused_import(
        port,
        "quota",
        list(hostile_archives.repeated_paragraphs(12, prefix="quota")),
        space=Space(visibility="project", project="atlas", name="budget"),
    )
    cases["write_over_size"] = refused_write(port, "writes-size", "a" * (3 * MIB))
    cases["write_with_credential"] = refused_write(
        port, "writes-secret", "b" * (MIB + MIB // 2) + " " + hostile_archives.CREDENTIAL.decode()
    )
    cases["export_cut_off"] = cut_off_export(port)
    return cases


async def repeat_curve(server: Server, name: str, send: Send, n: int) -> None:
    """Sends the refusal `n` times; prints RSS (MiB) after each."""
    curve: list[float] = []
    outcome = ""
    cpu = server.cpu_seconds()
    for _ in range(n):
        outcome = await send()
        curve.append(server.status("VmRSS") / MIB)
    cpu = server.cpu_seconds() - cpu
    print(
        f"{name:26} {outcome[:40]:40} x{n}: RSS after 1st {curve[0]:.0f} MiB, after last "
        f"{curve[-1]:.0f} MiB ({curve[-1] - curve[0]:+.0f}), server cpu {cpu / n:.2f} s/call",
        flush=True,
    )
    print("  curve (MiB): " + " ".join(f"{rss:.0f}" for rss in curve), flush=True)
    marks = [i for i in (1, 20, 50, 100, n) if i <= n]
    print(
        "  after call " + ", ".join(f"{i}: {curve[i - 1]:.0f}" for i in sorted(set(marks))),
        flush=True,
    )


async def wait_indexed(port: int) -> None:
    async with AsyncClient(f"127.0.0.1:{port}", token=MEMBER, timeout=60) as client:
        for _ in range(1200):
            status = await client.index_status()
            if status.backlog == 0:
                return
            await asyncio.sleep(0.5)
    raise SystemExit("the exported space was not indexed within 10 minutes")


async def main(valid_mib: int, repeat: int, only: list[str]) -> None:
    print("generating archives ...", flush=True)
    makers = {
        **hostile_archives.ATTACKS,
        "bomb_300x1mib": hostile_archives.many_documents,
        "credential_after_64mib": hostile_archives.credential_after,
    }
    # With --only, only the archives asked for (a 2 GiB gzip takes a while to make).
    attacks = {name: list(make()) for name, make in makers.items() if not only or name in only}
    valid = [] if repeat else list(hostile_archives.valid_archive(valid_mib * MIB))
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {
            **os.environ,
            "ENGRAM_METRICS_PORT": "0",
            "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
            "ENGRAM_ACCESS_LOG": "false",
            "ENGRAM_QUOTA_PRIVATE": str(2048 * MIB),
            "ENGRAM_QUOTA_TENANT_TOTAL": str(4096 * MIB),
            "ENGRAM_RATE_LIMIT_PER_MINUTE": "0",
            "ENGRAM_QUOTA_PROJECT": str(PROJECT_QUOTA),
            # Off unless asked: with the schedule on, RSS steps up once by 55-87 MiB about a
            # minute after start (the first walk's time), inside whichever refusal's curve
            # runs then (bench/RESULTS.md, issue 29).
            "ENGRAM_MAINTENANCE_SCHEDULE": os.environ.get("ENGRAM_MAINTENANCE_SCHEDULE", "false"),
        }
        process = spawn(
            [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port)]
            + ["--data-dir", f"{tmp}/state"],
            env,
            Path(tmp) / "server.log",
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await asyncio.wait_for(channel.channel_ready(), 600)
                await asyncio.sleep(2)
                server = Server(process.pid)
                print(f"server RSS at start {server.status('VmRSS') / MIB:.0f} MiB", flush=True)
                if repeat:
                    cases = refusals(port, attacks)
                    unknown = set(only) - set(cases)
                    if unknown:
                        raise SystemExit(f"unknown --only {unknown}; known: {sorted(cases)}")
                    if not only or "export_cut_off" in only:
                        # The space the export reads, indexed before any measurement.
                        loaded = await asyncio.to_thread(
                            run_import,
                            port,
                            list(hostile_archives.repeated_paragraphs(16)),
                            MEMBER,
                            EXPORTED,
                        )
                        print(f"exported space: {loaded}", flush=True)
                        await wait_indexed(port)
                    for name, send in cases.items():
                        if not only or name in only:
                            await repeat_curve(server, name, send, repeat)
                    return
                for name, pieces in attacks.items():
                    await measure(server, channel, port, name, pieces)
                denied = [b"\x1f" * MIB] * 128
                target = Space(visibility="org", tenant="acme", name="plans")
                await measure(
                    server, channel, port, "128MiB_other_tenant", denied, VIEWER_OF_OTHER, target
                )
                await measure(server, channel, port, f"valid_{valid_mib}MiB", valid)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except Exception:  # noqa: BLE001 - a bench cleans up whatever happened
                process.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--valid-mib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=0, help="send each refusal N times")
    parser.add_argument("--only", action="append", default=[], help="with --repeat: this one")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.valid_mib, arguments.repeat, arguments.only))
