"""Where a remote quota charge's time goes (issue 34, part 2): WriteDocument against a storage
process that charges through QuotaService over gRPC (`remote`, the chart's default) and one
that charges in its own process (`in-process`, `storage.remoteQuota: false`).

    PYTHONPATH=$PWD/services:$PWD .venv/bin/python bench/quota_hop_bench.py \
        [--count 300] [--concurrency 1,4] [--rounds 2] [--per-service] [--keep DIR]

FerretDB (on PostgreSQL) and NATS from deploy/local; for each topology the chart rendered
with helm/engram/ci/loopback-values.yaml (TLS and mTLS on every hop, the service token the
chart gives storage, one database per topology, or with --per-service a database and
credentials per service as the chart's default has it) and its authz, quota and storage
processes started as the chart runs them (deploy/local/cluster.py), each under
bench/quota_hop_probe.py (absolute PYTHONPATH: the processes run in their own directories),
which times the steps of a charge and counts MongoDB commands.
Nothing else runs: no indexer, search or OpenSearch (the chart's OpenSearch URL points at a
closed port no started process uses).

Each phase is `--count` WriteDocument calls creating new ~600-byte documents (every write
grows its space, so every write charges once, before its save) over 8 spaces of 2 tenants,
at a fixed concurrency, the topologies alternating (their order flips each round). Per
phase it prints the write p50/p99 seen by the client, the time split (the storage handler,
the charge as storage waits for it, the Charge handler in QuotaService, the caller's
authentication there, the ledger's apply, the document save), MongoDB commands per write
and their mean round trip per process, and CPU ms per write per process (FerretDB:
its process group, PostgreSQL included). Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for entry in (str(ROOT / "services"), str(ROOT), str(BENCH)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from benchlib import closed_loop, load_average, percentile  # noqa: E402
from loadlib import deploy  # noqa: E402

from engram.client import ClientTls, EngramClient, Space  # noqa: E402
from tests.support.tokens import mint  # noqa: E402

PROBE = BENCH / "quota_hop_probe.py"
TOPOLOGIES = ("remote", "in-process")
TENANTS = ("acme", "globex")
SPACES_PER_TENANT = 4
WARMUP = 40
# A port nothing listens on: the chart wants an OpenSearch URL, no process started here uses it.
NO_OPENSEARCH = "http://127.0.0.1:9"


@dataclass
class Topology:
    name: str
    cluster: Any
    clients: list[tuple[EngramClient, Space]]
    probes: dict[str, Path]
    phase_index: int = 0
    pids: dict[str, int] = field(default_factory=dict)


def group_cpu(pgid: int) -> float:
    """User + system CPU seconds of every process in a process group (a backend's session:
    FerretDB and its PostgreSQL)."""
    total = 0.0
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid:
                times = process.cpu_times()
                total += times.user + times.system
        except (psutil.Error, ProcessLookupError):
            continue
    return total


def tree_cpu(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def plan_topology(
    cl: Any, helm: Any, urls: Any, workdir: Path, topology: str, *, own_on: Any = None
) -> tuple[Any, dict[str, Path]]:
    """The chart rendered for `topology`; authz, quota (remote only) and storage under the
    probe. `own_on` (the running FerretDB, PostgreSQL handler): each service in a database
    of its own with its own credentials, as the chart's `mongodb.perService` and the load
    harness have it (else one shared database per topology)."""
    values = workdir / "values.yaml"
    values.write_text(deploy.TOPOLOGY_VALUES[topology], encoding="utf-8")
    database = "quotahop_" + topology.replace("-", "_")
    if own_on is not None:
        own = cl.own_databases(deploy.launcher_module(), own_on, database)
        urls = cl.Backends(urls.nats, urls.mongo, urls.opensearch, mongo_services=own)
    plan = cl.local_plan(
        helm, urls, workdir, database=database, values=(cl.LOOPBACK_VALUES, values)
    )
    wanted = ["authz", "storage"] + (["quota"] if topology == "remote" else [])
    probes: dict[str, Path] = {}
    for name in list(plan.specs):
        if name not in wanted:
            del plan.specs[name]
            continue
        spec = plan.specs[name]
        if spec.argv[0] != "engram":
            raise RuntimeError(f"{name} runs {spec.argv}, not engram")
        probes[name] = workdir / f"probe-{name}.json"
        spec.argv = [sys.executable, str(PROBE), *spec.argv[1:]]
        spec.env["QUOTA_HOP_PROBE_OUT"] = str(probes[name])
    return plan, probes


def signal_probe(topology: Topology, name: str, signum: int) -> None:
    os.kill(topology.cluster.procs[name].pid, signum)


def read_probe(topology: Topology, name: str, timeout: float = 10.0) -> dict[str, Any]:
    path = topology.probes[name]
    path.unlink(missing_ok=True)
    signal_probe(topology, name, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}'s probe did not answer")
        time.sleep(0.05)
    found: dict[str, Any] = json.loads(path.read_text())
    return found


async def write_phase(
    topology: Topology, count: int, concurrency: int, tag: str
) -> tuple[list[float], float]:
    body = ("quota hop bench line of text. " * 20)[:560]

    async def one(i: int) -> None:
        client, space = topology.clients[i % len(topology.clients)]
        await client.write_document(f"hop/{tag}/{i:05d}.md", f"{tag} {i:05d} {body}\n", space=space)

    return await closed_loop(one, count=count, concurrency=concurrency, cap=600)


def summarize(samples: list[float]) -> str:
    if not samples:
        return "-"
    return (
        f"p50 {percentile(samples, 50):6.2f}  p99 {percentile(samples, 99):6.2f}  "
        f"mean {sum(samples) / len(samples):6.2f} ms  (n {len(samples)})"
    )


async def measure(
    topology: Topology, ferret_pgid: int, count: int, concurrency: int
) -> dict[str, Any]:
    topology.phase_index += 1
    tag = f"c{concurrency}-{topology.phase_index}"
    for name in topology.probes:
        signal_probe(topology, name, signal.SIGUSR2)
    await asyncio.sleep(0.2)
    cpu_before = {n: tree_cpu(pid) for n, pid in topology.pids.items()}
    ferret_before = group_cpu(ferret_pgid)
    latencies, elapsed = await write_phase(topology, count, concurrency, tag)
    cpu = {n: (tree_cpu(pid) - cpu_before[n]) * 1000 / count for n, pid in topology.pids.items()}
    cpu["ferretdb+postgresql"] = (group_cpu(ferret_pgid) - ferret_before) * 1000 / count
    probes = {name: read_probe(topology, name) for name in topology.probes}
    return {
        "latencies": latencies,
        "rate": len(latencies) / elapsed,
        "cpu": cpu,
        "probes": probes,
    }


def report(
    topology: str, concurrency: int, round_: int, result: dict[str, Any], count: int
) -> None:
    lat = result["latencies"]
    print(
        f"\n== {topology}, concurrency {concurrency}, round {round_}: {len(lat)} writes, "
        f"{result['rate']:.1f}/s, write p50 {percentile(lat, 50):.2f} ms, "
        f"p99 {percentile(lat, 99):.2f} ms (load {load_average()})",
        flush=True,
    )
    for process, probe in result["probes"].items():
        for label, samples in sorted(probe["timers"].items()):
            print(f"   [{process:7}] {label:44} {summarize(samples)}")
        commands = probe["commands"]
        total = sum(c for c, _ in commands.values())
        print(f"   [{process:7}] MongoDB commands per write: {total / count:.2f}")
        for label, (n, ms) in sorted(commands.items(), key=lambda kv: -kv[1][0]):
            print(f"   [{process:7}]     {label:40} {n / count:5.2f}/write  {ms / n:5.2f} ms each")
    cpu = "  ".join(f"{name} {ms:.2f}" for name, ms in result["cpu"].items())
    print(f"   CPU ms per write: {cpu}", flush=True)


@contextlib.contextmanager
def running(workdir: Path, *, per_service: bool) -> Iterator[tuple[dict[str, Topology], int]]:
    cl = deploy.cluster_module()
    launcher = deploy.launcher_module()
    from tests.deploy.chart import Helm, helm_binary

    binary = helm_binary()
    if binary is None:
        raise SystemExit("helm is not installed: run `make helm-install`")
    launcher.bind_to_this_process()
    launcher.require_provisioned(["mongo", "nats"])
    backends: list[Any] = []
    clusters: list[Any] = []
    try:
        mongo = launcher.start_mongo(workdir / "mongo")
        backends.append(mongo)
        nats = launcher.start_nats(workdir / "nats")
        backends.append(nats)
        urls = cl.Backends(nats.url, mongo.url, NO_OPENSEARCH)
        topologies: dict[str, Topology] = {}
        for name in TOPOLOGIES:
            directory = workdir / name
            directory.mkdir()
            plan, probes = plan_topology(
                cl, Helm(binary), urls, directory, name, own_on=mongo if per_service else None
            )
            cluster = cl.Cluster(plan)
            clusters.append(cluster)
            cluster.start_all()
            assert plan.tls is not None, "the loopback values turn TLS on"
            tls_files = deploy._client_tls(plan, directory)
            tls = ClientTls(ca_file=tls_files.ca, cert_file=tls_files.cert, key_file=tls_files.key)
            clients = []
            for tenant in TENANTS:
                client = EngramClient(
                    plan.specs["storage"].address,
                    token=mint(f"bench-{tenant}", tenant, "member", secret=plan.secret),
                    tls=tls,
                    timeout=30.0,
                )
                clients += [
                    (client, Space(visibility="private", name=f"hop{k}"))
                    for k in range(SPACES_PER_TENANT)
                ]
            pids = {n: cluster.procs[n].pid for n in plan.specs}
            topologies[name] = Topology(name, cluster, clients, probes, pids=pids)
        yield topologies, mongo.pid
    finally:
        for cluster in clusters:
            cluster.stop(grace=10)
        for backend in backends:
            backend.stop()


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    with running(workdir, per_service=args.per_service) as (topologies, ferret_pgid):
        print(f"started; load average {load_average()}", flush=True)
        for topology in topologies.values():
            await write_phase(topology, WARMUP, 4, "warmup")
        for round_ in range(1, args.rounds + 1):
            order = list(TOPOLOGIES) if round_ % 2 else list(reversed(TOPOLOGIES))
            for concurrency in concurrencies:
                for name in order:
                    result = await measure(topologies[name], ferret_pgid, args.count, concurrency)
                    report(name, concurrency, round_, result, args.count)
        for topology in topologies.values():
            for client, _ in topology.clients[::SPACES_PER_TENANT]:
                await client.close()
        print(f"\ndone; load average {load_average()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300, help="writes per phase")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated, e.g. 1,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--per-service",
        action="store_true",
        help="each service in its own database with its own credentials (chart default)",
    )
    parser.add_argument("--keep", type=Path, help="work directory to keep (logs, probes)")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(bench(args, args.keep))
        return
    with tempfile.TemporaryDirectory(prefix="quota-hop-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
