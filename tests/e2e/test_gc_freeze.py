"""`engram dev`, once serving, has frozen its start-up heap out of the garbage collector's
view (so a full collection walks only what was made since) and reports it on /metrics."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_dev_for_humans import CHILD_SECONDS, free_port

pytestmark = pytest.mark.e2e


def test_dev_freezes_its_start_up_heap(tmp_path: Path) -> None:
    port, metrics = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "engram", "dev", "--port", str(port), "--data-dir", str(tmp_path)],
        env={**os.environ, "ENGRAM_METRICS_PORT": str(metrics)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert f"serving on 127.0.0.1:{port}" in first, first
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=30) as answer:
            body = answer.read().decode()
    finally:
        process.terminate()
        try:
            process.communicate(timeout=CHILD_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    found = re.search(r"^engram_gc_frozen_objects (\S+)$", body, re.MULTILINE)
    assert found is not None, body[:2000]
    # Modules, descriptors, settings and clients: far more than a bare interpreter's.
    assert float(found.group(1)) > 50_000
