"""TLS and mTLS on a real server: the typed client and the CLI over TLS, a client without a
certificate refused by an mTLS server, a certificate rotated on disk served without a
restart, and a long-lived channel across the server's connection-age GOAWAYs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram
from engram.cli.app import app
from engram.client import ClientTls, EngramClient, Space
from engram.domain.errors import Unavailable
from engram.runtime.channels import ChannelConfig, open_channel
from tests.conftest import EngramFactory
from tests.support.certs import Pair, TestCa

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")


@pytest.fixture
def ca(tmp_path: Path) -> TestCa:
    return TestCa(tmp_path)


@pytest.fixture
def server_pair(ca: TestCa) -> Pair:
    return ca.issue("server", server=True)


@pytest.fixture
async def tls_engram(
    engram_factory: EngramFactory, server_pair: Pair
) -> AsyncIterator[EmbeddedEngram]:
    async with engram_factory(
        tls_cert_file=server_pair.cert, tls_key_file=server_pair.key
    ) as running:
        yield running


@pytest.fixture
async def mtls_engram(
    engram_factory: EngramFactory, ca: TestCa, server_pair: Pair
) -> AsyncIterator[EmbeddedEngram]:
    async with engram_factory(
        tls_cert_file=server_pair.cert, tls_key_file=server_pair.key, tls_client_ca_file=ca.path
    ) as running:
        yield running


def addr(engram: EmbeddedEngram) -> str:
    return f"127.0.0.1:{engram.port}"


async def health(address: str, config: ChannelConfig) -> grpc.StatusCode:
    """One health check on a fresh channel (a new connection, a new handshake)."""
    async with open_channel(address, config) as channel:
        try:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def test_typed_client_round_trip_over_tls(tls_engram: EmbeddedEngram, ca: TestCa) -> None:
    tls = ClientTls(ca_file=ca.path)
    async with EngramClient(addr(tls_engram), space=NOTES, tls=tls, retries=0) as client:
        await client.write_document("MEMORY.md", "# over TLS\n")
        assert (await client.read_document("MEMORY.md")).content == "# over TLS\n"
    # A plaintext client cannot talk to the TLS port, nor one trusting another CA.
    async with EngramClient(addr(tls_engram), space=NOTES, retries=0, timeout=5) as plain:
        with pytest.raises(Unavailable):
            await plain.read_document("MEMORY.md")
    stranger = TestCa(ca.directory, "stranger")
    assert (
        await health(addr(tls_engram), ChannelConfig(tls=ClientTls(ca_file=stranger.path)))
        == grpc.StatusCode.UNAVAILABLE
    )


async def test_cli_over_tls(tls_engram: EmbeddedEngram, ca: TestCa) -> None:
    runner = CliRunner()

    def cli(*args: str, stdin: str | None = None) -> tuple[int, str]:
        result = runner.invoke(app, [*args], input=stdin)
        return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")

    address = addr(tls_engram)
    code, text = await asyncio.to_thread(
        cli, "--ca", str(ca.path), "write", "a.md", "--name", "notes", "--addr", address,
        stdin="hello over TLS\n",
    )  # fmt: skip
    assert code == 0, text
    code, text = await asyncio.to_thread(
        cli, "--tls", "--ca", str(ca.path), "read", "a.md", "--name", "notes", "--addr", address
    )
    assert (code, text) == (0, "hello over TLS\n")
    # Without --tls the CLI says it could not reach the server, with no traceback.
    code, text = await asyncio.to_thread(cli, "read", "a.md", "--name", "notes", "--addr", address)
    assert code == 1 and "UNAVAILABLE" in text and "Traceback" not in text, text
    code, text = await asyncio.to_thread(
        cli, "--ca", str(ca.directory / "missing.pem"), "read", "a.md", "--addr", address
    )
    assert code == 2 and "missing.pem" in text and "Traceback" not in text, text


async def test_mtls_refuses_a_client_without_a_certificate(
    mtls_engram: EmbeddedEngram, ca: TestCa
) -> None:
    address = addr(mtls_engram)
    assert await health(address, ChannelConfig(tls=ClientTls(ca_file=ca.path))) == (
        grpc.StatusCode.UNAVAILABLE
    )
    # A certificate from another CA is refused too.
    stranger = TestCa(ca.directory, "stranger").issue("mallory", server=False)
    refused = ClientTls(ca_file=ca.path, cert_file=stranger.cert, key_file=stranger.key)
    assert await health(address, ChannelConfig(tls=refused)) == grpc.StatusCode.UNAVAILABLE

    agent = ca.issue("agent", server=False)
    tls = ClientTls(ca_file=ca.path, cert_file=agent.cert, key_file=agent.key)
    assert await health(address, ChannelConfig(tls=tls)) == grpc.StatusCode.OK
    async with EngramClient(address, space=NOTES, tls=tls, retries=0) as client:
        await client.write_document("MEMORY.md", "# mTLS\n")
        assert (await client.read_document("MEMORY.md")).content == "# mTLS\n"


async def test_a_certificate_rotated_on_disk_is_served_without_restart(
    tls_engram: EmbeddedEngram, ca: TestCa, server_pair: Pair
) -> None:
    address = addr(tls_engram)
    old = ChannelConfig(tls=ClientTls(ca_file=ca.path))
    renewed_ca = TestCa(ca.directory, "renewed")
    new = ChannelConfig(tls=ClientTls(ca_file=renewed_ca.path))
    assert await health(address, old) == grpc.StatusCode.OK
    assert await health(address, new) == grpc.StatusCode.UNAVAILABLE
    # An open connection keeps its certificate across the rotation.
    async with open_channel(address, old) as kept:
        stub = health_pb2_grpc.HealthStub(kept)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)

        # As cert-manager does: the new pair replaces the files in place.
        staging = ca.directory / "staging"
        staging.mkdir()
        rotated = renewed_ca.issue("server", server=True, into=staging)
        os.replace(rotated.key, server_pair.key)
        os.replace(rotated.cert, server_pair.cert)

        deadline = time.monotonic() + 10
        while await health(address, new) != grpc.StatusCode.OK:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            await asyncio.sleep(0.1)
        assert await health(address, old) == grpc.StatusCode.UNAVAILABLE
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)


def client_ports(server_port: int) -> set[int]:
    """Local ports of this host's established TCP connections to `server_port` (Linux; gRPC's
    dual-stack sockets list IPv4 connections in tcp6)."""
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, remote, state = line.split()[1:4]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def test_a_long_lived_channel_survives_connection_age(
    engram_factory: EngramFactory,
) -> None:
    """The server closes every connection after 1 s (GOAWAY, 5 s grace); a client calling
    for 3.5 s over one channel sees every call succeed, over several connections.

    The client keeps its default retries, as every caller does: a call sent in the instant
    between the server's GOAWAY and the client reading it can fail with UNAVAILABLE in every
    gRPC implementation (grpc/grpc#31733, grpc/grpc-java#9566), and a read is safe to repeat.
    Without retries this test failed once in a CI run on a loaded machine."""
    async with (
        engram_factory(
            grpc_max_connection_age_seconds=1.0, grpc_max_connection_age_grace_seconds=5.0
        ) as engram,
        EngramClient(addr(engram), space=NOTES, timeout=10) as client,
    ):
        await client.write_document("MEMORY.md", "# aged\n")
        calls, deadline, seen = 0, time.monotonic() + 3.5, set[int]()
        while time.monotonic() < deadline and calls < 5000:
            seen |= client_ports(engram.port)
            # Several calls in flight at once, so some straddle a GOAWAY.
            results = await asyncio.gather(*(client.read_document("MEMORY.md") for _ in range(8)))
            assert all(r.content == "# aged\n" for r in results)
            calls += len(results)
        assert calls >= 80
        # The channel moved to new connections as the old ones aged out.
        assert len(seen) >= 2, seen
