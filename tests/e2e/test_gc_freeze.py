"""`engram dev`, once serving, has frozen its start-up heap out of the garbage collector's
view (so a full collection walks only what was made since) and reports it on /metrics."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_dev_for_humans import dev_process, free_port

pytestmark = pytest.mark.e2e


def test_dev_freezes_its_start_up_heap(tmp_path: Path) -> None:
    metrics = free_port()
    with dev_process(tmp_path, ENGRAM_METRICS_PORT=str(metrics)):
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=30) as answer:
            body = answer.read().decode()
    found = re.search(r"^engram_gc_frozen_objects (\S+)$", body, re.MULTILINE)
    assert found is not None, body[:2000]
    # Modules, descriptors, settings and clients: far more than a bare interpreter's.
    assert float(found.group(1)) > 50_000
