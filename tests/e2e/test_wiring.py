"""The composition root as a user meets it: `engram dev` ready means ready, the health
endpoints of the metrics port, dev --auth honouring the JWT settings, and missing
production settings named all at once."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.app.embedded import embedded_engram
from engram.authz.enforcement import FixedPrincipalAuthenticator
from engram.client import AsyncClient, Space, Unauthenticated
from engram.domain.principals import LOCAL_ADMIN
from engram.runtime.health import Dependency
from engram.runtime.server import GrpcServer
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_the_first_search_after_start_finds_a_paraphrase_undegraded(tmp_path: Path) -> None:
    settings = server_settings(tmp_path / "engram")
    async with embedded_engram(settings) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            await client.write_document(
                "pets.md", "My dog loves to chase tennis balls in the park."
            )
        assert await engram.relay.drained(60)
    # A new process on the same data: its query embedder is loaded before SERVING.
    async with embedded_engram(settings) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            response = await client.search("canine enjoys fetching", mode="semantic", limit=1)
    assert not response.degraded, response.degraded_reasons
    assert [r.path for r in response.results] == ["pets.md"]


async def test_dev_auth_honours_the_jwt_audience_and_issuer(tmp_path: Path) -> None:
    settings = server_settings(
        tmp_path / "engram",
        jwt_secret=TEST_JWT_SECRET,
        jwt_audience="engram-api",
        jwt_issuer="https://idp.example",
    )
    async with embedded_engram(settings, require_auth=True) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            good = mint(aud="engram-api", iss="https://idp.example")
            await client.as_caller(good).write_document("a.md", "hello")
            # The admin token `engram dev --auth` prints passes the same checks.
            await client.as_caller(engram.admin_token()).write_document("a.md", "hello")
            for wrong in (
                mint(aud="someone-else", iss="https://idp.example"),
                mint(aud="engram-api", iss="https://other.example"),
                mint(iss="https://idp.example"),
            ):
                with pytest.raises(Unauthenticated):
                    await client.as_caller(wrong).write_document("a.md", "hello")


async def test_metrics_port_serves_metrics_healthz_readyz_and_404(tmp_path: Path) -> None:
    port = free_port()
    async with embedded_engram(server_settings(tmp_path / "e", metrics_port=port)) as engram:
        assert engram.server.metrics_port == port
        status, body = await asyncio.to_thread(get, port, "/metrics")
        assert status == 200 and "engram_grpc_server_handled_total" in body
        assert (await asyncio.to_thread(get, port, "/healthz"))[0] == 200
        assert (await asyncio.to_thread(get, port, "/readyz"))[0] == 200
        for other in ("/", "/health", "/metricsz"):
            assert (await asyncio.to_thread(get, port, other))[0] == 404


async def test_health_follows_a_dependency_probe(tmp_path: Path) -> None:
    """NOT_SERVING (and /readyz 503) while a backend's probe fails, SERVING when it passes;
    the real backends' probes are exercised in test_health_backends.py."""
    up = asyncio.Event()

    async def probe() -> bool:
        return up.is_set()

    port = free_port()
    settings = server_settings(tmp_path, metrics_port=port, health_probe_seconds=0.1)
    server = GrpcServer(
        settings, [], FixedPrincipalAuthenticator(LOCAL_ADMIN), [Dependency("thing", probe)]
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
                return int(answer.status)

            assert await status() == health_pb2.HealthCheckResponse.NOT_SERVING
            assert (await asyncio.to_thread(get, port, "/readyz"))[0] == 503
            assert (await asyncio.to_thread(get, port, "/healthz"))[0] == 200
            up.set()
            for _ in range(200):  # 10 s at most
                if await status() == health_pb2.HealthCheckResponse.SERVING:
                    break
                await asyncio.sleep(0.05)
            assert await status() == health_pb2.HealthCheckResponse.SERVING
            assert (await asyncio.to_thread(get, port, "/readyz"))[0] == 200
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("service", "names"),
    [
        ("indexer", ["ENGRAM_NATS_URL", "ENGRAM_MONGO_URI", "ENGRAM_OPENSEARCH_URL"]),
        ("search", ["ENGRAM_OPENSEARCH_URL", "ENGRAM_MONGO_URI", "ENGRAM_VECTOR_DIR"]),
    ],
)
def test_serve_without_settings_fails_with_one_message(service: str, names: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "engram", "serve", service, "--port", "0"],
        env={**env, "ENGRAM_METRICS_PORT": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert output.count("missing settings") == 1
    assert all(name in output for name in names), output
