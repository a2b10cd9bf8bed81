"""The load harness, CI-sized: bench/load.py against `engram dev`, one 30-second run at a low
arrival rate on a small pre-loaded corpus. Every request must succeed and every acknowledged
write must read back; no timing is asserted (figures are bench/load.py's job)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.load

ROOT = Path(__file__).resolve().parents[2]
RATE = 4.0
DURATION = 30.0


@pytest.mark.timeout(600)
def test_a_low_rate_run_on_engram_dev_has_no_errors_and_loses_no_write(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(ROOT / "bench" / "load.py"),
        "--target", "dev",
        "--chunks", "150",
        "--tenants", "3",
        "--agents-per-tenant", "2",
        "--no-corpus-cache",
        "--warmup-seconds", "2",
        "--rate", str(RATE),
        "--duration", str(DURATION),
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=570, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    run = result["fixed"]
    assert run["scheduled"] == int(RATE * DURATION)
    assert run["completed"] == run["scheduled"], run
    assert run["errors"] == 0, (run["per_rpc"], run["error_samples"])
    # Every operation of the default mix ran (120 draws: a missing one would be a bug).
    assert set(run["per_rpc"]) == {"search", "memory_search", "append", "replace", "read"}
    loss = result["loss"]
    assert loss["acknowledged"] > 0
    assert loss["acknowledged"] == loss["attempted"]
    assert loss["lost"] == 0, loss["lost_writes"]
    assert (out / "table.txt").is_file()
    assert (out / "latency_over_time.png").stat().st_size > 0
    # The deployment's process and the generator's own were measured.
    assert {"dev", "generator"} <= set(run["processes"])
