"""Child-session scenarios for test_backend_lifecycle.py (not collected on its own: the name
does not start with ``test_``). Each one starts real backends through the suite's own
`real_backends` fixture and is then cut short, the way a slow machine or a crash cuts a real
session short. The parent test checks that nothing the child started is left running."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.support.backends import RealBackends

REPORT = Path(os.environ.get("ENGRAM_LEAK_REPORT", "/dev/null"))


def _report(real_backends: RealBackends, names: list[str]) -> None:
    running = {name: real_backends.running(name) for name in names}
    REPORT.write_text(
        json.dumps({name: {"pid": b.pid, "port": b.port} for name, b in running.items()})
    )


def test_times_out_after_starting_backends(real_backends: RealBackends) -> None:
    _report(real_backends, ["nats", "mongo"])
    time.sleep(120)  # the per-test timeout (pytest-timeout, signal method) fires first


def test_times_out_while_opensearch_starts(real_backends: RealBackends) -> None:
    REPORT.write_text("{}")
    real_backends.url("opensearch")  # cut by the timeout while the node boots
    time.sleep(120)


def test_killed_after_starting_backends(real_backends: RealBackends) -> None:
    _report(real_backends, ["nats"])
    time.sleep(120)  # the parent SIGKILLs this whole pytest process
