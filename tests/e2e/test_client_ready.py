"""What callers that time their calls need from engram.client (the benchmarks and the load
harness, issue 30): `wait_ready` connects before the clock starts, and `status_name` counts
a failure by the gRPC code it ended with, a deadline included."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.client import (
    AsyncClient,
    Client,
    EtagMismatch,
    RateLimited,
    Space,
    Unavailable,
    status_name,
)
from engram.client.errors import domain_error
from engram.runtime.errors import status_code_for, to_rpc_status
from tests.support.settings import server_settings

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_wait_ready_waits_for_a_server_that_starts_late(tmp_path: Path) -> None:
    port = free_port()
    async with AsyncClient(f"127.0.0.1:{port}", space=Space(name="ready")) as client:
        waiting = asyncio.create_task(client.wait_ready(60))
        await asyncio.sleep(0.5)
        assert not waiting.done(), "returned before anything listened"
        async with embedded_engram(server_settings(tmp_path / "engram", grpc_port=port)):
            await asyncio.wait_for(waiting, 60)
            assert client._conn.channel is not None
            assert client._conn.channel.get_state() == grpc.ChannelConnectivity.READY
            written = await client.with_options(retries=0).write_document("a.md", "ready")
            assert written.created


async def test_wait_ready_raises_unavailable_when_nothing_answers() -> None:
    async with AsyncClient(f"127.0.0.1:{free_port()}") as client:
        started = time.monotonic()
        with pytest.raises(Unavailable) as down:
            await client.wait_ready(0.5)
        assert time.monotonic() - started < 5
        assert "not connected within 0.5 s" in down.value.message
        assert status_name(down.value) == "UNAVAILABLE"


async def test_the_blocking_client_waits_too(engram: EmbeddedEngram) -> None:
    def script() -> tuple[int, str]:
        with Client(f"127.0.0.1:{engram.port}", space=Space(name="ready")) as memory:
            memory.wait_ready(30)
            count = memory.get_usage().document_count
        with Client(f"127.0.0.1:{free_port()}") as nobody:
            try:
                nobody.wait_ready(0.5)
            except Unavailable as error:
                return count, error.message
        return count, ""

    count, refused = await asyncio.to_thread(script)
    assert count == 0
    assert "not connected within 0.5 s" in refused


async def test_a_deadline_is_counted_as_deadline_exceeded() -> None:
    """The server is paused past the call's deadline: the client raises Unavailable (a
    failure engram did not shape), and status_name still tells the deadline apart.

    The pause is real: a server whose GetUsage waits until the test lets it go. (A deadline
    of a microsecond against engram itself is not enough: gRPC rounds a deadline up to the
    next millisecond, and a loopback GetUsage can answer within it.)"""
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def paused_get_usage(request: bytes, context: object) -> bytes:
        arrived.set()
        await release.wait()
        return b""

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "engram.v1.StorageService",
                {"GetUsage": grpc.unary_unary_rpc_method_handler(paused_get_usage)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AsyncClient(f"127.0.0.1:{port}", retries=0) as client:
            await client.wait_ready(30)
            started = time.monotonic()
            with pytest.raises(Unavailable) as late:
                await client.with_options(timeout=0.2).get_usage()
            waited = time.monotonic() - started
    finally:
        release.set()
        await server.stop(None)
    assert arrived.is_set(), "the call never reached the server"
    assert 0.15 < waited < 10, f"gave up after {waited:.3f} s, not at its 0.2 s deadline"
    assert status_name(late.value) == "DEADLINE_EXCEEDED"


@pytest.mark.parametrize(
    ("raised", "name"),
    [
        (EtagMismatch("changed", subject="a.md", current_sha256="ab" * 32), "ABORTED"),
        (RateLimited("slow down", retry_after_seconds=1), "RESOURCE_EXHAUSTED"),
        (Unavailable("backend down"), "UNAVAILABLE"),
    ],
)
def test_a_server_shaped_error_is_counted_by_its_class(raised: Exception, name: str) -> None:
    assert isinstance(raised, EtagMismatch | RateLimited | Unavailable)
    status = to_rpc_status(raised)
    call = grpc.aio.AioRpcError(
        code=status_code_for(raised),
        initial_metadata=grpc.aio.Metadata(),
        trailing_metadata=grpc.aio.Metadata(
            ("grpc-status-details-bin", status.SerializeToString())
        ),
        details=status.message,
    )
    assert status_name(domain_error(call, "StorageService.ReadDocument")) == name
