"""What tracing costs a read RPC on `engram dev`: p50/p99 of ReadDocument with tracing off
(no SDK provider, the default without OTEL_EXPORTER_OTLP_ENDPOINT) and on (an SDK provider
with a BatchSpanProcessor, as in production, into the SDK's in-memory exporter so that no
network export is measured). Sequential calls from a client in the same process; the modes
alternate over several rounds so that drift on a shared machine hits both alike.

    python bench/tracing_overhead.py [--count 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from benchlib import closed_loop
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engram.app.embedded import embedded_engram
from engram.client import AsyncClient, Space
from engram.runtime import tracing
from engram.runtime.settings import Settings

SPACE = Space(name="bench", tenant="local")
DOCUMENTS = 50


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(count: int, rounds: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=Path(data_dir), grpc_port=0, metrics_port=0, access_log=False)
        async with (
            embedded_engram(settings) as engram,
            AsyncClient(f"127.0.0.1:{engram.port}", space=SPACE) as client,
        ):
            for n in range(DOCUMENTS):
                await client.write_document(f"doc-{n}.md", f"# Note {n}\n" + "text " * 80)
            await engram.relay.drained(60)

            async def read(index: int) -> object:
                return await client.read_document(f"doc-{index % DOCUMENTS}.md")

            await closed_loop(read, count=500, concurrency=1, cap=30)  # warm up
            results: dict[str, list[float]] = {"off": [], "on": []}
            for _ in range(rounds):
                for mode in ("off", "on"):
                    if mode == "on":
                        tracing.install(provider)
                    else:
                        tracing.uninstall()
                    latencies, _ = await closed_loop(read, count=count, concurrency=1, cap=60)
                    results[mode].extend(latencies)
            tracing.uninstall()
    provider.force_flush()
    spans = len(exporter.get_finished_spans())
    provider.shutdown()
    print(f"ReadDocument on engram dev, {rounds} rounds x {count} sequential calls per mode")
    print("| tracing | calls | p50 ms | p99 ms | mean ms |")
    print("|---|---|---|---|---|")
    for mode, latencies in results.items():
        print(
            f"| {mode} | {len(latencies)} | {percentile(latencies, 0.5):.3f} | "
            f"{percentile(latencies, 0.99):.3f} | {statistics.fmean(latencies):.3f} |"
        )
    off, on = (percentile(results[m], 0.5) for m in ("off", "on"))
    print(f"p50 overhead with tracing on: {on - off:+.3f} ms ({(on / off - 1) * 100:+.1f} %)")
    print(f"spans recorded while on: {spans}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.count, args.rounds))
