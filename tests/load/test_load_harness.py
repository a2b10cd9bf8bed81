"""The load harness, CI-sized: bench/load.py against `engram dev` and against the real
target (every service its own process from the rendered chart, on NATS, FerretDB and
OpenSearch), one 30-second run at a low arrival rate on a small pre-loaded corpus. Every
request must succeed and every acknowledged write must read back; no timing is asserted
(figures are bench/load.py's job)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from tests.deploy.chart import helm_binary
from tests.support.backends import load_launcher

pytestmark = pytest.mark.load

ROOT = Path(__file__).resolve().parents[2]
RATE = 4.0
DURATION = 30.0


def _real_target_missing() -> str | None:
    launcher = load_launcher()
    missing = [n for n in ("nats", "mongo", "opensearch") if not launcher.is_provisioned(n)]
    if missing:
        return f"backends not built: {missing} (run `make backends-install`)"
    if helm_binary() is None:
        return "helm is not installed (run `make helm-install`)"
    return None


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", ["dev", pytest.param("real", marks=pytest.mark.real_backend)])
def test_a_low_rate_run_has_no_errors_and_loses_no_write(target: str, tmp_path: Path) -> None:
    if target == "real" and (missing := _real_target_missing()):
        if os.environ.get("ENGRAM_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(ROOT / "bench" / "load.py"),
        "--target", target,
        "--chunks", "150",
        "--tenants", "3",
        "--agents-per-tenant", "2",
        "--no-corpus-cache",
        "--warmup-seconds", "2",
        "--rate", str(RATE),
        "--duration", str(DURATION),
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=870, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    run = result["fixed"]
    assert run["scheduled"] == int(RATE * DURATION)
    assert run["completed"] == run["scheduled"], run
    assert run["errors"] == 0, (run["per_rpc"], run["error_samples"])
    # Every operation of the default mix ran (120 draws: a missing one would be a bug).
    assert set(run["per_rpc"]) == {"search", "memory_search", "append", "replace", "read"}
    # Both legs found the probed writes: the vector leg's new vectors reach search too.
    for leg in ("freshness_ms", "vector_freshness_ms"):
        assert run[leg]["samples"] > 0, leg
        assert run[leg]["not_found"] == 0, (leg, run[leg])
    loss = result["loss"]
    assert loss["acknowledged"] > 0
    assert loss["acknowledged"] == loss["attempted"]
    assert loss["lost"] == 0, loss["lost_writes"]
    assert (out / "table.txt").is_file()
    assert (out / "latency_over_time.png").stat().st_size > 0
    # The deployment's process and the generator's own were measured.
    expected = {"dev"} if target == "dev" else {"storage", "indexer", "search", "workspace"}
    assert expected | {"generator"} <= set(run["processes"])


def test_the_loss_check_finds_a_write_that_is_not_there(tmp_path: Path) -> None:
    """The ledger check against a running `engram dev`: a real append and a real replace
    pass; an acknowledged append whose token is not in the document, and a replace whose
    acknowledged version does not hold its token, are reported lost."""
    sys.path.insert(0, str(ROOT / "bench"))
    from loadlib import deploy, ledger

    from engram.client import AsyncClient, Space
    from tests.support.tokens import mint

    async def scenario(d: deploy.Deployment) -> dict[str, object]:
        agent = {"tenant": "t1", "sub": "ann", "space": "ws-ann"}
        agent["token"] = mint("ann", "t1", "member", secret=d.secret)
        space = Space(tenant="t1", name="ws-ann")
        # The ledger check reads through the channel; the writes go through engram.client.
        async with grpc.aio.insecure_channel(d.addresses["storage"]) as channel:
            client = AsyncClient(channel=channel, token=agent["token"], space=space)
            log = await client.write_document("daily/log.md", "ltkept one\n")
            first = await client.write_document("notes/n.md", "ltfirst")
            second = await client.write_document("notes/n.md", "ltsecond")
            entries = [
                {"kind": "append", "sub": "ann", "path": "daily/log.md", "token": "ltkept",
                 "acked": True, "version": log.document.version},
                {"kind": "append", "sub": "ann", "path": "daily/log.md", "token": "ltnever",
                 "acked": True, "version": log.document.version},
                {"kind": "replace", "sub": "ann", "path": "notes/n.md", "token": "ltsecond",
                 "acked": True, "version": second.document.version},
                # Claims the first version held another write.
                {"kind": "replace", "sub": "ann", "path": "notes/n.md", "token": "ltother",
                 "acked": True, "version": first.document.version},
            ]  # fmt: skip
            return await ledger.check(channel, entries, {"ann": agent})

    with deploy.dev(tmp_path / "deploy") as d:
        found = asyncio.run(scenario(d))
    assert found["acknowledged"] == 4
    assert found["lost"] == 2, found
    assert {w["token"] for w in found["lost_writes"]} == {"ltnever", "ltother"}
