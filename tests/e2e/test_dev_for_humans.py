"""`engram dev` as a person at a terminal meets it, and a taken port as `engram dev` and
`engram serve` report it: text logs without a line per call by default (the settings still
choose either way), and one line naming the port, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram.client import Client, Space
from engram.runtime.server import PortInUse
from engram.runtime.settings import Settings
from tests.conftest import EngramFactory

pytestmark = pytest.mark.e2e

ENGRAM = [sys.executable, "-m", "engram"]
LOG_SETTINGS = ("ENGRAM_LOG_FORMAT", "ENGRAM_ACCESS_LOG")
# Bounds a child that should end by itself (a busy port) or start serving.
CHILD_SECONDS = 120


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process holds (listening), for as long as the test runs."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_engram(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENGRAM, *args],
        env={**os.environ, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=CHILD_SECONDS,
        check=False,
    )


def assert_one_line_naming(result: subprocess.CompletedProcess[str], what: str, port: int) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and "add_port" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"the {what} port 127.0.0.1:{port} is already in use" in lines[0]
    return lines[0]


def test_dev_names_a_taken_grpc_port(tmp_path: Path, taken_port: int) -> None:
    result = run_engram(
        ["dev", "--port", str(taken_port), "--data-dir", str(tmp_path / "d")],
        tmp_path,
        ENGRAM_METRICS_PORT="0",
    )
    line = assert_one_line_naming(result, "gRPC", taken_port)
    assert "--port or ENGRAM_GRPC_PORT" in line


def test_dev_names_a_taken_metrics_port(tmp_path: Path, taken_port: int) -> None:
    result = run_engram(
        ["dev", "--port", "0", "--metrics-port", str(taken_port), "--data-dir", str(tmp_path)],
        tmp_path,
    )
    line = assert_one_line_naming(result, "metrics", taken_port)
    assert "--metrics-port or ENGRAM_METRICS_PORT (0 turns it off)" in line


def test_serve_names_a_taken_port_before_reaching_its_backends(
    tmp_path: Path, taken_port: int
) -> None:
    # No backend is configured: the port is checked first, so the port is what is reported.
    grpc_taken = run_engram(["serve", "storage"], tmp_path, ENGRAM_GRPC_PORT=str(taken_port))
    assert "ENGRAM_GRPC_PORT" in assert_one_line_naming(grpc_taken, "gRPC", taken_port)
    metrics_taken = run_engram(
        ["serve", "quota", "--port", "0"], tmp_path, ENGRAM_METRICS_PORT=str(taken_port)
    )
    assert "ENGRAM_METRICS_PORT" in assert_one_line_naming(metrics_taken, "metrics", taken_port)


async def test_a_port_taken_after_the_check_is_reported_by_the_server(
    engram_factory: EngramFactory, taken_port: int
) -> None:
    """The server's own start names the port too (what the CLI's early check cannot cover:
    a port taken in between, or a server started from code)."""
    with pytest.raises(PortInUse) as caught:
        async with engram_factory(grpc_port=taken_port):
            pass
    assert caught.value.port == taken_port and caught.value.setting == "ENGRAM_GRPC_PORT"
    with pytest.raises(PortInUse) as caught:
        async with engram_factory(grpc_port=0, metrics_port=taken_port):
            pass
    assert caught.value.what == "metrics"


def test_serve_keeps_json_logs_and_access_logs_by_default() -> None:
    settings = Settings()
    assert (settings.log_format, settings.access_log) == ("json", True)


@dataclass
class DevProcess:
    """An `engram dev` child: its gRPC port, and its stderr once it has stopped."""

    port: int
    stderr: str = ""


@contextlib.contextmanager
def dev_process(tmp_path: Path, **env: str) -> Iterator[DevProcess]:
    """Runs `engram dev` (log settings only from `env`) until the block ends, then stops it
    with SIGTERM and checks it exited cleanly."""
    dev = DevProcess(port=free_port())
    inherited = {k: v for k, v in os.environ.items() if k not in LOG_SETTINGS}
    process = subprocess.Popen(
        [*ENGRAM, "dev", "--port", str(dev.port), "--data-dir", str(tmp_path / "state")],
        env={**inherited, "ENGRAM_METRICS_PORT": "0", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert f"serving on 127.0.0.1:{dev.port}" in first, first
        yield dev
        process.terminate()
        _, dev.stderr = process.communicate(timeout=CHILD_SECONDS)
        assert process.returncode == 0, dev.stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _serve_and_write(tmp_path: Path, **env: str) -> str:
    """Starts `engram dev`, writes one document over gRPC, stops it; returns its stderr."""
    with dev_process(tmp_path, **env) as dev:
        with Client(f"127.0.0.1:{dev.port}", space=Space(name="notes"), timeout=30) as client:
            client.write_document("a.md", "hello")
    return dev.stderr


def test_dev_logs_text_without_a_line_per_call(tmp_path: Path) -> None:
    stderr = _serve_and_write(tmp_path)
    lines = stderr.strip().splitlines()
    assert lines and not any(line.startswith("{") for line in lines), stderr
    assert any(" info engram.runtime.server: serving addr=127.0.0.1:" in line for line in lines)
    assert "WriteDocument" not in stderr, "no access log line in engram dev by default"


def test_dev_takes_json_and_access_logs_when_the_settings_ask(tmp_path: Path) -> None:
    stderr = _serve_and_write(tmp_path, ENGRAM_LOG_FORMAT="json", ENGRAM_ACCESS_LOG="true")
    entries = [json.loads(line) for line in stderr.strip().splitlines() if line.startswith("{")]
    assert entries and len(entries) == len(stderr.strip().splitlines()), stderr
    calls = [e for e in entries if "WriteDocument" in json.dumps(e)]
    assert calls, "one access log line for the write"
