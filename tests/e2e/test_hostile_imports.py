"""Issue 13: hostile archives against `engram dev --auth` in its own process.

Each attack archive is refused with INVALID_ARGUMENT, the server's resident memory barely
moves (measured from /proc: the peak is reset before each import), and a health check sent
while the import runs is answered. A caller who may not write the space is refused after the
first message of a 128 MiB stream, before it is buffered. Timings (CPU per refusal, health
latency) are measured by bench/import_bench.py, not asserted here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc
from tests.support import hostile_archives
from tests.support.dev_server import DevServer, dev_server
from tests.support.grpc_helpers import CallFailure, import_sync, space
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
MEMBER = bearer(mint("ann", "acme", "member"))
VIEWER_OF_OTHER = bearer(mint("eve", "globex", "viewer"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with dev_server(tmp_path_factory.mktemp("hostile") / "state") as running:
        yield running


async def import_stream(
    port: int,
    pieces: Iterator[bytes],
    metadata: tuple[tuple[str, str], ...],
    ref: space_pb2.SpaceRef | None = None,
) -> CallFailure:
    outcome = await import_sync(port, ref or space("imports"), pieces, metadata)
    assert isinstance(outcome, CallFailure), f"the import succeeded: {outcome}"
    return outcome


async def health_during(channel: grpc.aio.Channel, work: asyncio.Task[CallFailure]) -> int:
    """Sends health checks while `work` runs (at least one); returns how many were answered."""
    health = health_pb2_grpc.HealthStub(channel)
    answered = 0
    while True:
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        answered += 1
        if work.done():
            return answered
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("attack", sorted(hostile_archives.ATTACKS))
async def test_attack_archive_is_refused_without_bloat(server: DevServer, attack: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        before = server.rss()
        server.reset_peak()
        work = asyncio.create_task(
            import_stream(server.port, hostile_archives.ATTACKS[attack](), MEMBER)
        )
        assert await health_during(channel, work) >= 1
        failure = await work
        growth = server.peak() - before
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure.message
    assert failure.reason == "INVALID_ARCHIVE", failure.reason
    assert "nothing was imported" in failure.message or "split it" in failure.message
    assert growth < 50 * MIB, f"server peak RSS grew by {growth / MIB:.1f} MiB"


async def test_unauthorized_import_is_refused_at_the_first_message(server: DevServer) -> None:
    """128 MiB streamed at tenant acme's space by a viewer of tenant globex: refused after
    the first message, before anything is buffered."""
    target = space("plans", space_pb2.VISIBILITY_ORG, tenant="acme")
    before = server.rss()
    server.reset_peak()
    failure = await import_stream(
        server.port, hostile_archives.repeated(b"\x1f", 128 * MIB), VIEWER_OF_OTHER, target
    )
    growth = server.peak() - before
    assert failure.code == grpc.StatusCode.PERMISSION_DENIED, failure.message
    assert failure.reason == "TENANT_MISMATCH"
    assert growth < 20 * MIB, f"server peak RSS grew by {growth / MIB:.1f} MiB"


async def test_a_valid_import_still_lands(server: DevServer) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)

        async def messages() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
            yield storage_pb2.ImportSpaceRequest(
                space=space("valid"), strategy=storage_pb2.IMPORT_STRATEGY_SKIP
            )
            for piece in hostile_archives.valid_archive(3 * MIB, doc_bytes=256 * 1024):
                yield storage_pb2.ImportSpaceRequest(data=piece)

        result = await stub.ImportSpace(messages(), metadata=MEMBER, timeout=60)
    assert result.bytes >= 3 * MIB and result.written == len(result.entries) > 10
    assert all(e.outcome == storage_pb2.IMPORT_OUTCOME_CREATED for e in result.entries)
