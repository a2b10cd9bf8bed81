"""Faults under load, CI-sized: bench/load.py on the real backends (engram as separate
processes) at a low fixed rate, the indexer SIGKILLed 8 s into the run and started again.
Nothing may be lost: every acknowledged write reads back, every one still in its document
is found in the index, and no request fails. Recovery times are printed, never asserted
(figures are bench/load.py's job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.backends import load_launcher

pytestmark = [pytest.mark.load, pytest.mark.real_backend]

ROOT = Path(__file__).resolve().parents[2]
RATE = 4.0
DURATION = 30.0


def _require_backends() -> None:
    launcher = load_launcher()
    missing = [n for n in ("nats", "mongo", "opensearch") if not launcher.is_provisioned(n)]
    if missing and os.environ.get("ENGRAM_REQUIRE_REAL_BACKENDS") != "1":
        pytest.skip(f"backends not provisioned: {', '.join(missing)} (make backends-install)")
    assert not missing, f"backends not provisioned: {', '.join(missing)}"


@pytest.mark.timeout(900)
def test_indexer_sigkill_under_load_loses_no_write_and_no_index_entry(tmp_path: Path) -> None:
    _require_backends()
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(ROOT / "bench" / "load.py"),
        "--target", "real",
        "--plan", "serve",
        "--chunks", "120",
        "--tenants", "2",
        "--agents-per-tenant", "2",
        "--no-corpus-cache",
        "--warmup-seconds", "2",
        "--rate", str(RATE),
        "--duration", str(DURATION),
        "--fault", "indexer-kill",
        "--fault-at", "8",
        "--fault-down", "3",
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=870, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    run = result["fixed"]
    fault = run["faults"]["indexer-kill"]
    print(json.dumps(fault, indent=1))
    assert fault["down_at_s"] is not None and fault["back_at_s"] is not None
    assert fault["down_at_s"] < fault["back_at_s"]
    assert run["errors"] == 0, run["per_rpc"]
    loss = result["loss"]
    assert loss["acknowledged"] > 0 and loss["lost"] == 0, loss["lost_writes"]
    index = fault["index"]
    assert index["tokens_checked"] > 0
    assert index["missing"] == 0, index["missing_tokens"]
    assert index["unreadable_documents"] == []
    assert fault["criteria"]["no_index_entry_lost"]
    assert "fault indexer-kill" in (out / "table.txt").read_text()
