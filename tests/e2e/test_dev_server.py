"""The all-in-one server as a user meets it: health, reflection, metrics, restarts, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engram.client import AsyncClient, Client, DocumentNotFound, Space, Unauthenticated
from engram.v1 import storage_pb2_grpc
from tests.conftest import EngramFactory
from tests.e2e.test_cli_memory import HEADINGS as PROMPT_HEADINGS
from tests.support.grpc_helpers import write_request

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_health_reports_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "engram.v1.StorageService"):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health.Check(health_pb2.HealthCheckRequest(service="engram.v1.NoSuchService"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_lists_the_served_services(channel: grpc.aio.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def ask() -> reflection_pb2.ServerReflectionResponse:
        call = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        return [response async for response in call][0]

    services = {s.name for s in (await ask()).list_services_response.service}
    assert "engram.v1.StorageService" in services
    assert "grpc.health.v1.Health" in services
    assert "engram.v1.WorkspaceService" in services


async def test_metrics_endpoint_counts_calls(engram_factory: EngramFactory) -> None:
    port = free_port()
    async with engram_factory(metrics_port=port) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            await client.write_document("a.md", "x")
            with pytest.raises(DocumentNotFound):
                await client.read_document("missing.md")
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        )
    assert (
        'engram_grpc_server_handled_total{code="OK",method="/engram.v1.StorageService/'
        'WriteDocument"}' in body
    )
    assert 'code="NOT_FOUND",method="/engram.v1.StorageService/ReadDocument"' in body


async def test_request_id_is_echoed_or_made(channel: grpc.aio.Channel) -> None:
    stub = storage_pb2_grpc.StorageServiceStub(channel)
    call = stub.WriteDocument(write_request("a.md", "x"), metadata=(("x-request-id", "r-123"),))
    await call
    assert ("x-request-id", "r-123") in tuple(await call.trailing_metadata())
    call = stub.WriteDocument(write_request("b.md", "y"))
    await call
    made = dict(await call.trailing_metadata())["x-request-id"]
    assert len(made) == 32


async def test_state_survives_a_restart(engram_factory: EngramFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "persist"
    async with engram_factory(data_dir=data_dir) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            await client.write_document("MEMORY.md", "remember me")
            await client.write_document("MEMORY.md", "remember me, v2")
    async with engram_factory(data_dir=data_dir) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
            doc = await client.read_document("MEMORY.md")
            usage = await client.get_usage()
    assert doc.content == "remember me, v2" and doc.version == 2
    assert usage.used_bytes == len("remember me, v2") and usage.document_count == 1


def test_engram_dev_demo_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "ENGRAM_METRICS_PORT": "0"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram",
            "dev",
            "--demo",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "state"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if "demo done" in line:
                break
        output = "".join(lines)
        assert f"serving on 127.0.0.1:{port}" in output
        # The CLI's default space, so `engram ls` after `make run` shows these documents.
        assert "seeded private:default: AGENTS.md" in output, output
        assert "memory_write memory: appended to MEMORY.md" in output
        assert "memory_write daily_log: appended to daily/" in output
        found = output[output.index("memory_search: 'ERR_4021'") : output.index("system prompt: ")]
        rows = [line for line in found.splitlines() if line.startswith("│")]
        assert "MEMORY.md" in rows[0], found
        prompt = output[output.index("system prompt: ") :]
        positions = [prompt.index(heading) for heading in PROMPT_HEADINGS]
        assert positions == sorted(positions), prompt
        assert "The user prefers concise answers" in prompt, "the fact reached the prompt"
        assert "indexed (waited " in output
        assert "in the space private:default" in output and "`engram ls`" in output
        listing = subprocess.run(
            [sys.executable, "-m", "engram", "ls", "--addr", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "MEMORY.md" in listing and "AGENTS.md" in listing, listing
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest()).status == (
                health_pb2.HealthCheckResponse.SERVING
            )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        _, stderr = process.communicate(timeout=5)
        assert "Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_engram_dev_auth_prints_a_working_admin_token(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "ENGRAM_METRICS_PORT": "0"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram",
            "dev",
            "--auth",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "state"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        assert "auth on" in lines[1]
        token = lines[2].strip()
        with Client(f"127.0.0.1:{port}", space=NOTES) as anonymous:
            with pytest.raises(Unauthenticated):
                anonymous.get_usage()
        with Client(f"127.0.0.1:{port}", token=token, space=NOTES) as admin:
            assert admin.get_usage().tenant_quota_bytes == 1024**3
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
