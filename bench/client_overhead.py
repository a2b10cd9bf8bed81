"""What engram.client adds to a call over a raw generated stub (issue 30: at most 0.1 ms per
call), for ReadDocument, WriteDocument (a replace) and Search (lexical, so that embedding a
query does not drown the difference), against `engram dev` in a subprocess.

Four callers make the same sequential calls: the grpc.aio stub and `AsyncClient` on an event
loop, and the blocking stub and the blocking `Client` (which drives AsyncClient's coroutines
over grpc's blocking channel, engram.client.driven; driving a coroutine that does nothing is
measured too, as the floor under it). Raw stubs carry the same 30 s deadline as the clients.
For each, the figures are this process's CPU time per call (every thread of it, the server's
excluded: it runs in its own process), which is what the client's own work costs and what a
busy shared machine disturbs least, and the median latency. The callers alternate over
several rounds so that drift hits them alike.

    python bench/client_overhead.py [--count 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from benchlib import free_port, spawn
from cli_startup import ENGRAM, wait_serving

from engram.client import AsyncClient, Client, Space
from engram.v1 import search_pb2, search_pb2_grpc, space_pb2, storage_pb2, storage_pb2_grpc

TARGET_MS = 0.1
# The raw stubs carry the deadline every client call carries (its default `timeout`): a
# deadline is grpc's work (a timer per call), the same for any caller that sets one.
DEADLINE = 30.0
SPACE = Space(name="bench")
WIRE_SPACE = space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="bench")
DOCUMENTS = 20
BODY = "# Note\n" + "the quick brown fox jumps over the lazy dog " * 20
OPERATIONS = ("read", "write", "search")


def read_request(n: int) -> storage_pb2.ReadDocumentRequest:
    return storage_pb2.ReadDocumentRequest(space=WIRE_SPACE, path=f"doc-{n % DOCUMENTS}.md")


def write_request(n: int) -> storage_pb2.WriteDocumentRequest:
    return storage_pb2.WriteDocumentRequest(
        space=WIRE_SPACE, path=f"w-{n % DOCUMENTS}.md", content=f"{BODY}{n}"
    )


SEARCH_REQUEST = search_pb2.SearchRequest(
    spaces=[WIRE_SPACE], query="quick fox", limit=5, mode=search_pb2.SEARCH_MODE_LEXICAL
)


Timed = tuple[list[float], float]


async def timed_async(call: Callable[[int], object], count: int) -> Timed:
    """Per-call latencies (ms) and this process's CPU ms per call."""
    latencies = []
    cpu = time.process_time()
    for n in range(count):
        started = time.perf_counter()
        await call(n)  # type: ignore[misc]
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies, (time.process_time() - cpu) * 1000 / count


def timed_sync(call: Callable[[int], object], count: int) -> Timed:
    latencies = []
    cpu = time.process_time()
    for n in range(count):
        started = time.perf_counter()
        call(n)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies, (time.process_time() - cpu) * 1000 / count


Results = dict[tuple[str, str], tuple[list[float], list[float]]]


async def _nothing() -> None:
    return None


def record(results: Results, key: tuple[str, str], timed: Timed) -> None:
    latencies, cpu = results.setdefault(key, ([], []))
    latencies.extend(timed[0])
    cpu.append(timed[1])


async def measure(addr: str, count: int, rounds: int) -> Results:
    results: Results = {}
    async with grpc.aio.insecure_channel(addr) as channel, AsyncClient(addr, space=SPACE) as ac:
        storage = storage_pb2_grpc.StorageServiceStub(channel)
        search = search_pb2_grpc.SearchServiceStub(channel)
        sync_channel = grpc.insecure_channel(addr)
        sync_storage = storage_pb2_grpc.StorageServiceStub(sync_channel)
        sync_search = search_pb2_grpc.SearchServiceStub(sync_channel)
        sc = Client(addr, space=SPACE)
        calls_async = {
            ("stub", "read"): lambda n: storage.ReadDocument(read_request(n), timeout=DEADLINE),
            ("client", "read"): lambda n: ac.read_document(f"doc-{n % DOCUMENTS}.md"),
            ("stub", "write"): lambda n: storage.WriteDocument(write_request(n), timeout=DEADLINE),
            ("client", "write"): lambda n: ac.write_document(f"w-{n % DOCUMENTS}.md", f"{BODY}{n}"),
            ("stub", "search"): lambda n: search.Search(SEARCH_REQUEST, timeout=DEADLINE),
            ("client", "search"): lambda n: ac.search("quick fox", limit=5, mode="lexical"),
        }
        calls_sync = {
            ("sync stub", "read"): lambda n: sync_storage.ReadDocument(
                read_request(n), timeout=DEADLINE
            ),
            ("sync client", "read"): lambda n: sc.read_document(f"doc-{n % DOCUMENTS}.md"),
            ("sync stub", "write"): lambda n: sync_storage.WriteDocument(
                write_request(n), timeout=DEADLINE
            ),
            ("sync client", "write"): lambda n: sc.write_document(
                f"w-{n % DOCUMENTS}.md", f"{BODY}{n}"
            ),
            ("sync stub", "search"): lambda n: sync_search.Search(SEARCH_REQUEST, timeout=DEADLINE),
            ("sync client", "search"): lambda n: sc.search("quick fox", limit=5, mode="lexical"),
            # The floor under the blocking Client: driving a coroutine that does nothing
            # (Client._run is the path every call takes).
            ("sync client", "hop"): lambda n: sc._run(_nothing()),
        }
        try:
            for call in calls_async.values():  # warm up every path
                await timed_async(call, 50)
            for call in calls_sync.values():
                timed_sync(call, 50)
            for _ in range(rounds):
                for key, call in calls_async.items():
                    record(results, key, await timed_async(call, count))
                for key, call in calls_sync.items():
                    record(results, key, timed_sync(call, count))
        finally:
            sc.close()
            sync_channel.close()
    return results


def report(results: Results, count: int, rounds: int) -> None:
    print(f"engram dev in a subprocess, {rounds} rounds x {count} sequential calls per caller")
    print("| call | caller | CPU ms/call | client adds (CPU) | p50 ms | client adds (p50) |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for operation in OPERATIONS:
        for raw, typed in (("stub", "client"), ("sync stub", "sync client")):
            base_latency = statistics.median(results[(raw, operation)][0])
            base_cpu = statistics.median(results[(raw, operation)][1])
            for caller in (raw, typed):
                latencies, cpus = results[(caller, operation)]
                p50, cpu = statistics.median(latencies), statistics.median(cpus)
                added = ("", "")
                if caller == typed:
                    added = (f"{cpu - base_cpu:+.3f}", f"{p50 - base_latency:+.3f}")
                    worst = max(worst, cpu - base_cpu)
                print(
                    f"| {operation} | {caller} | {cpu:.3f} | {added[0]} | {p50:.3f} | {added[1]} |"
                )
    hop_latencies, hop_cpus = results[("sync client", "hop")]
    print(
        f"blocking Client driving a call alone (no RPC): {statistics.median(hop_cpus):.3f} ms "
        f"CPU, p50 {statistics.median(hop_latencies):.3f} ms per call"
    )
    verdict = "ok" if worst <= TARGET_MS else "OVER"
    print(f"largest CPU added: {worst:+.3f} ms per call (target {TARGET_MS} ms): {verdict}")


def main(count: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "ENGRAM_METRICS_PORT": "0", "ENGRAM_ACCESS_LOG": "false"}
        server = spawn(
            [*ENGRAM, "dev", "--port", str(port), "--data-dir", f"{tmp}/state"],
            env,
            Path(tmp) / "server.log",
        )
        try:
            wait_serving(port, time.monotonic() + 180)
            addr = f"127.0.0.1:{port}"
            with Client(addr, space=SPACE) as seeding:
                for n in range(DOCUMENTS):
                    seeding.write_document(f"doc-{n}.md", BODY)
            results = asyncio.run(measure(addr, count, rounds))
        finally:
            server.terminate()
            server.wait(timeout=30)
    report(results, count, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    main(args.count, args.rounds)
