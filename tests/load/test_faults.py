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
from typing import Any

import pytest

from tests.support.backends import load_launcher
from tests.support.scripts import load_script

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


# --- the fault figures, from hand-made rows (no deployment) ---------------------------------


def _faults_module() -> object:
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from loadlib import faults

    return faults


def test_freshness_recovery_ends_when_the_backlog_is_found() -> None:
    faults: Any = _faults_module()
    # (acknowledged at, found after, token, agent): the fault is 10..20 s.
    samples = [
        [5.0, 0.2, "a", "x"],
        [12.0, 9.5, "b", "x"],
        [19.0, 3.0, "c", "x"],
        [25.0, 0.3, "d", "x"],
    ]
    figures = faults._freshness_recovery(samples, 10.0, 20.0, 2.0, 30.0)
    assert figures["over_target"] == 2 and figures["never_found"] == 0
    assert figures["recovery_s"] == 2.0  # the probe acknowledged at 19 s was found at 22 s
    assert not figures["recovery_is_lower_bound"]
    never = faults._freshness_recovery([*samples, [15.0, None, "e", "x"]], 10.0, 20.0, 2.0, 30.0)
    assert never["recovery_is_lower_bound"] and never["recovery_s"] == 25.0


def test_degraded_recovery_is_not_claimed_when_the_run_ended_first() -> None:
    faults: Any = _faults_module()
    rows = [[t, "search", 10.0, "OK", 10.0 <= t <= 42.0] for t in range(60)]
    seen = faults._degraded(rows, 40.0, 59.0)
    assert (seen["answers"], seen["recovery_observed"], seen["recovery_s"]) == (33, True, 2.0)
    unseen = faults._degraded(rows, 81.0, 59.0)
    assert (unseen["recovery_observed"], unseen["recovery_s"]) == (False, None)


def test_a_second_storage_replica_gets_its_own_ports_and_every_client_both(tmp_path: Path) -> None:
    faults: Any = _faults_module()
    cluster: Any = load_script("deploy/local/cluster.py")
    Spec, Plan = cluster.Spec, cluster.Plan

    ports = {"ENGRAM_GRPC_PORT": "5001", "ENGRAM_METRICS_PORT": "9001"}
    storage = Spec("storage", ["engram", "serve", "storage"], ports, 5001, 9001)
    clients = {"ENGRAM_STORAGE_ADDR": "127.0.0.1:5001"}
    workspace = Spec("workspace", ["engram", "serve", "workspace"], clients, 5002, 9002)
    plan = Plan({"storage": storage, "workspace": workspace}, "secret", "token", tmp_path)
    faults.add_storage_replica(plan, lambda n: [6001, 7001][:n])
    second = plan.specs["storage-2"]
    assert (second.grpc_port, second.metrics_port) == (6001, 7001)
    assert second.env == {"ENGRAM_GRPC_PORT": "6001", "ENGRAM_METRICS_PORT": "7001"}
    assert workspace.env["ENGRAM_STORAGE_ADDR"] == "127.0.0.1:5001,127.0.0.1:6001"
    assert storage.env["ENGRAM_GRPC_PORT"] == "5001"
