"""Real backends for tests: started once per session through deploy/local/backends.py,
or taken from ENGRAM_TEST_NATS_URL / ENGRAM_TEST_MONGO_URI / ENGRAM_TEST_OPENSEARCH_URL.

Tests never build a backend: `make backends-install` does, before the suites, with no
per-test timeout to race. A backend that is not built fails (or skips) at once with "run
`make backends-install`". Every backend started here is bound to the test process: stopped at
the session's end, by an atexit hook, or by the launcher's reaper if pytest dies, so no
process or port outlives the run.

With ENGRAM_REQUIRE_REAL_BACKENDS=1 (CI) a backend that cannot start fails the test;
otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV_URLS = {
    "nats": "ENGRAM_TEST_NATS_URL",
    "mongo": "ENGRAM_TEST_MONGO_URI",
    "opensearch": "ENGRAM_TEST_OPENSEARCH_URL",
}


def load_launcher() -> ModuleType:
    """deploy/local/backends.py, loaded once per process (it keeps the session's registry)."""
    name = "engram_local_backends"
    if name in sys.modules:
        return sys.modules[name]
    path = ROOT / "deploy" / "local" / "backends.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class RealBackends:
    def __init__(self, *, require: bool) -> None:
        self.require = require
        self._launcher: ModuleType | None = None
        self._running: dict[str, Any] = {}
        self._failures: dict[str, str] = {}
        # ENGRAM_TEST_BACKENDS_ROOT lets a test find what a child session started.
        parent = os.environ.get("ENGRAM_TEST_BACKENDS_ROOT") or None
        self._root = Path(tempfile.mkdtemp(prefix="engram-backends-", dir=parent))

    @property
    def launcher(self) -> ModuleType:
        if self._launcher is None:
            self._launcher = load_launcher()
            self._launcher.bind_to_this_process()
        return self._launcher

    def url(self, name: str) -> str:
        """The backend's URL, starting it on first use; fails or skips if it cannot start."""
        given = os.environ.get(ENV_URLS[name])
        if given:
            return given
        if name in self._running:
            if not self._running[name].alive():
                # A test that stopped it to simulate an outage was cut short before it could
                # start it again: bring it back (same port, same data) rather than let every
                # later test of the session wait on a dead server.
                self.restart(name)
            return str(self._running[name].url)
        if name not in self._failures:
            try:
                self._running[name] = self._start(name)
                return str(self._running[name].url)
            except Exception as error:  # noqa: BLE001 - any launcher failure is reported
                self._failures[name] = f"{type(error).__name__}: {error}"
        reason = f"real backend {name} unavailable: {self._failures[name]}"
        if self.require:
            pytest.fail(reason)
        pytest.skip(reason)

    def running(self, name: str) -> Any:
        """The launcher's RunningBackend (only for backends this session started)."""
        self.url(name)
        if name not in self._running:
            pytest.skip(f"{name} was given by URL; this test needs to control its process")
        return self._running[name]

    def restart(self, name: str) -> Any:
        """Starts a stopped backend again on the same port and data directory."""
        previous = self._running[name]
        if previous.alive():
            previous.stop()
        starter = getattr(self.launcher, f"start_{name}")
        self._running[name] = starter(previous.data_dir, port=previous.port)
        return self._running[name]

    def _start(self, name: str) -> Any:
        data_dir = self._root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        self.launcher.require_provisioned([name])
        starter = getattr(self.launcher, f"start_{name}")
        return starter(data_dir)

    def stop_all(self) -> None:
        try:
            for backend in self._running.values():
                backend.stop()
        finally:
            self._running.clear()
            shutil.rmtree(self._root, ignore_errors=True)
