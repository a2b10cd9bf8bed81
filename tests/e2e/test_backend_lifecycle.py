"""Backends and the test session: tests never build a backend, and nothing a session started
outlives it, whether the session ends normally, a test times out (while a backend runs or
while one boots), or pytest itself is killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.backends import ENV_URLS, ROOT, RealBackends, load_launcher
from tests.support.processes import processes_mentioning

pytestmark = pytest.mark.real_backend

SCENARIOS = "tests/e2e/backend_leak_scenarios.py"
# A generous bound for the reaper or atexit hook to stop what was left (SIGTERM, then SIGKILL).
CLEANUP_BOUND_S = 40.0


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait_until_gone(marker: str) -> list[tuple[int, str]]:
    deadline = time.monotonic() + CLEANUP_BOUND_S
    while True:
        left = processes_mentioning(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _child_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_TEST_")}
    env.update(
        ENGRAM_TEST_BACKENDS_ROOT=str(tmp_path),
        ENGRAM_LEAK_REPORT=str(tmp_path / "report.json"),
        ENGRAM_REQUIRE_REAL_BACKENDS="1",
    )
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _child_pytest(test: str, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        f"{SCENARIOS}::{test}",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *options,
    ]


def _assert_nothing_left(tmp_path: Path, child_pid: int) -> None:
    left = _wait_until_gone(str(tmp_path))
    assert not left, f"backends outlived the session: {left}"
    report = json.loads((tmp_path / "report.json").read_text() or "{}")
    for name, started in report.items():
        assert _port_is_free(started["port"]), f"{name}'s port {started['port']} still taken"
    reapers = _wait_until_gone(f"_reap {child_pid}")
    assert not reapers, f"the reaper outlived its session: {reapers}"


def test_a_timeout_in_a_test_leaves_no_backend_behind(tmp_path: Path) -> None:
    child = subprocess.run(
        _child_pytest("test_times_out_after_starting_backends", "--timeout=20"),
        cwd=ROOT,
        env=_child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode != 0 and "Timeout" in child.stdout, child.stdout[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) == {"nats", "mongo"}, "the child never got its backends up"
    # The child has exited; its pid is only used to name its reaper.
    _assert_nothing_left(tmp_path, child_pid=0)


def test_a_hard_timeout_while_a_backend_boots_leaves_nothing_behind(tmp_path: Path) -> None:
    # The thread method ends pytest with os._exit: no fixture teardown, no atexit hook. Only
    # the launcher's reaper can stop the half-started node, which was never handed to the test.
    child = subprocess.Popen(
        _child_pytest(
            "test_times_out_while_opensearch_starts", "--timeout=3", "-o", "timeout_method=thread"
        ),
        cwd=ROOT,
        env=_child_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = child.communicate(timeout=300)
    assert child.returncode != 0 and "Timeout" in output, output[-2000:]
    _assert_nothing_left(tmp_path, child.pid)


def test_a_killed_pytest_leaves_no_backend_behind(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    child = subprocess.Popen(
        _child_pytest("test_killed_after_starting_backends", "--timeout=200"),
        cwd=ROOT,
        env=_child_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (report.exists() and report.read_text()):
            assert child.poll() is None, "the child session ended before starting NATS"
            assert time.monotonic() < deadline, "the child never started NATS"
            time.sleep(0.2)
        assert processes_mentioning(str(tmp_path)), "NATS should be running by now"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    _assert_nothing_left(tmp_path, child.pid)


def test_tests_refuse_to_build_a_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty_cache = tmp_path / "cache"
    monkeypatch.setenv("ENGRAM_CACHE_DIR", str(empty_cache))
    for variable in ENV_URLS.values():
        monkeypatch.delenv(variable, raising=False)
    assert os.environ.get("ENGRAM_BACKENDS_OFFLINE") == "1", "the suites must run offline"
    launcher = load_launcher()

    started = time.monotonic()
    with pytest.raises(launcher.ProvisionError, match="make backends-install"):
        launcher.provision(["mongo", "opensearch"])
    fixture = RealBackends(require=True)
    try:
        for name in ("mongo", "opensearch"):
            with pytest.raises(pytest.fail.Exception, match="run `make backends-install`"):
                fixture.url(name)
    finally:
        fixture.stop_all()
    assert time.monotonic() - started < 30, "refusing must not wait on a build"
    built = [p for p in empty_cache.rglob("*") if p.is_file() and p.name != ".provision.lock"]
    assert built == [], f"a test fixture downloaded or built something: {built[:5]}"


def test_backends_install_names_every_missing_tool(tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    env = {
        "PATH": str(empty_path),
        "HOME": str(tmp_path),
        "ENGRAM_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = subprocess.run(
        [
            sys.executable,
            "deploy/local/backends.py",
            "provision",
            "--check-npm",
            "--only",
            "opensearch",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    for tool in ("Java 17", "Maven", "npm"):
        assert tool in result.stderr, result.stderr
    assert not (tmp_path / "cache" / f"opensearch-{load_launcher().OPENSEARCH_VERSION}").exists()


def test_backends_install_names_a_missing_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGRAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ENGRAM_BACKENDS_OFFLINE")
    launcher = load_launcher()
    monkeypatch.setattr(launcher, "_find_go", lambda: None)
    with pytest.raises(launcher.ProvisionError, match="Go >= 1.24"):
        launcher.provision(["mongo"])
