"""The system under test, as processes the harness starts, knows by name, and can kill.

* `dev`: `engram dev --auth` (every service in one process on embedded backends);
* `real`: NATS, FerretDB and OpenSearch from deploy/local, and engram as separate processes
  configured by the rendered Helm chart (deploy/local/cluster.py's `plan`/`Cluster`); without
  helm, `engram serve <service>` processes configured here (`--plan serve`).

Both run through `Cluster` (deploy/local/cluster.py), which starts each process so that it
dies with the harness, waits for gRPC health SERVING, and kills or restarts one by name.
The deployment also knows the backends' `RunningBackend` objects, so a fault can stop and
start one (same port, same data).

Load-test settings, the same on both targets: the per-agent workspace write limits are off
(`ENGRAM_WORKSPACE_WRITES_PER_MINUTE=0`, `..._PER_HOUR=0`): the harness's agents write far
more often than an agent's 20 a minute, and a refusal would be counted as an error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LOAD_SETTINGS = {
    "ENGRAM_WORKSPACE_WRITES_PER_MINUTE": "0",
    "ENGRAM_WORKSPACE_WRITES_PER_HOUR": "0",
}
BACKEND_NAMES = ("nats", "mongo", "opensearch")
DATABASE = "engram_load"


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cluster_module() -> ModuleType:
    """deploy/local/cluster.py (Cluster, Plan, Spec, local_plan, render, plan)."""
    return _load("engram_local_cluster", ROOT / "deploy" / "local" / "cluster.py")


def launcher_module() -> ModuleType:
    """deploy/local/backends.py, the same instance the test support uses."""
    from tests.support.backends import load_launcher

    return load_launcher()


@dataclass
class ClientTlsFiles:
    """PEM files a client (the generator process) needs when the deployment speaks TLS."""

    ca: Path
    cert: Path | None
    key: Path | None


@dataclass
class Deployment:
    """A running system under test."""

    target: str
    workdir: Path
    secret: str
    # gRPC address per service the load calls: storage, search, workspace, indexer.
    addresses: dict[str, str]
    cluster: Any  # deploy/local/cluster.py's Cluster
    tls: ClientTlsFiles | None = None
    backends: dict[str, Any] = field(default_factory=dict)  # name -> RunningBackend
    launcher: ModuleType | None = None
    # Where the indexer's embedding cache lives: {"data_dir"} (dev) or {"mongo_uri",
    # "mongo_db"} (real).
    store: dict[str, str] = field(default_factory=dict)

    # --- processes ------------------------------------------------------------------------
    def engram_processes(self) -> list[str]:
        return list(self.cluster.plan.specs)

    def pids(self) -> dict[str, int]:
        """Every live process of the deployment by name: engram's, then the backends'
        (`backend:<name>`, the backend's process group leader; its children are counted by
        `procstats`)."""
        found = {name: proc.pid for name, proc in self.cluster.procs.items() if proc.poll() is None}
        for name, backend in self.backends.items():
            if backend.alive():
                found[f"backend:{name}"] = backend.pid
        return found

    def kill(self, name: str) -> None:
        """SIGKILL one engram process (as a node failure would)."""
        self.cluster.kill(name)

    def start(self, name: str, timeout: float = 120.0) -> None:
        """Starts one engram process again (same ports, same configuration) and waits until
        it is SERVING."""
        self.cluster.start(name)
        self.cluster.wait_serving([name], timeout)

    def restart(self, name: str, timeout: float = 120.0) -> None:
        self.kill(name)
        self.start(name, timeout)

    def restart_without(
        self, settings: Collection[str], names: Iterable[str], timeout: float = 120.0
    ) -> list[str]:
        """Stops (SIGTERM), then starts again without `settings` in their environment, those of
        the engram processes `names` that the deployment runs; returns them. The others keep
        running: they never read those settings."""
        chosen = [n for n in names if n in self.cluster.plan.specs]
        for name in chosen:
            for key in settings:
                self.cluster.plan.specs[name].env.pop(key, None)
        self.cluster.stop(chosen)
        for name in chosen:
            self.cluster.start(name)
        self.cluster.wait_serving(chosen, timeout)
        return chosen

    def stop_backend(self, name: str) -> None:
        self.backends[name].stop()

    def start_backend(self, name: str) -> None:
        """Starts a stopped backend on its port with its data."""
        assert self.launcher is not None
        old = self.backends[name]
        self.backends[name] = getattr(self.launcher, f"start_{name}")(old.data_dir, port=old.port)

    def log_tails(self) -> str:
        return "\n".join(self.cluster.log_tail(n) for n in self.cluster.plan.specs)

    def stop(self) -> dict[str, int]:
        codes: dict[str, int] = self.cluster.stop()
        for backend in self.backends.values():
            backend.stop()
        return codes


def _client_tls(plan: Any, workdir: Path) -> ClientTlsFiles | None:
    if plan.tls is None:
        return None
    directory = workdir / "client-tls"
    directory.mkdir(parents=True, exist_ok=True)
    ca = directory / "ca.pem"
    ca.write_bytes(plan.tls.ca)
    cert = key = None
    if plan.tls.cert is not None and plan.tls.key is not None:
        cert, key = directory / "client.crt", directory / "client.key"
        cert.write_bytes(plan.tls.cert)
        key.write_bytes(plan.tls.key)
    return ClientTlsFiles(ca, cert, key)


@contextlib.contextmanager
def dev(
    workdir: Path, *, data_dir: Path | None = None, settings: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """`engram dev --auth` on free ports; state in `data_dir` (default workdir/engram);
    `settings` added to the environment."""
    cl = cluster_module()
    workdir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(48)
    grpc_port, metrics_port = cl.free_ports(2)
    data = data_dir or workdir / "engram"
    env = {
        "ENGRAM_JWT_SECRET": secret,
        "ENGRAM_DATA_DIR": str(data),
        "ENGRAM_GRPC_HOST": "127.0.0.1",
        "ENGRAM_GRPC_PORT": str(grpc_port),
        "ENGRAM_METRICS_HOST": "127.0.0.1",
        "ENGRAM_METRICS_PORT": str(metrics_port),
        **LOAD_SETTINGS,
        **(settings or {}),
    }
    spec = cl.Spec("dev", ["engram", "dev", "--auth"], env, grpc_port, metrics_port)
    plan = cl.Plan({"dev": spec}, secret, "", workdir)
    cluster = cl.Cluster(plan)
    address = spec.address
    deployment = Deployment(
        "dev",
        workdir,
        secret,
        {s: address for s in ("storage", "search", "workspace", "indexer")},
        cluster,
        store={"data_dir": str(data)},
    )
    try:
        cluster.start_all()
        yield deployment
    finally:
        deployment.stop()


def _start_backends(launcher: ModuleType, root: Path) -> dict[str, Any]:
    launcher.bind_to_this_process()
    launcher.require_provisioned(list(BACKEND_NAMES))
    running: dict[str, Any] = {}
    try:
        for name in BACKEND_NAMES:
            (root / name).mkdir(parents=True, exist_ok=True)
            running[name] = getattr(launcher, f"start_{name}")(root / name)
    except BaseException:
        for backend in running.values():
            backend.stop()
        raise
    return running


# Chart values per topology: `remote` is the chart's default (storage charges quota through
# QuotaService over gRPC); `in-process` charges in storage's own process on the shared
# database, one hop less (issue 34, part 2 measures the difference).
TOPOLOGY_VALUES = {"remote": "", "in-process": "storage:\n  remoteQuota: false\n"}


def _chart_plan(
    workdir: Path, backends: dict[str, Any], settings: dict[str, str], topology: str = "remote"
) -> tuple[Any, dict[str, tuple[str, str]]]:
    """The chart rendered with the loopback values, the backends' URLs and LOAD_SETTINGS, and
    the services' own databases (service -> (URI, database)). On FerretDB's PostgreSQL
    handler each service gets a database and credentials of its own, as the chart's default
    (`mongodb.perService`) and `make cluster-local` have it; on SQLite, which has no users,
    every service shares one database (and the map is empty)."""
    cl = cluster_module()
    from tests.deploy.chart import Helm, helm_binary

    binary = helm_binary()
    if binary is None:
        raise RuntimeError("helm is not installed: run `make helm-install` or use --plan serve")
    values = workdir / "load-values.yaml"
    values.write_text(
        "config:\n"
        + "".join(f'  {k}: "{v}"\n' for k, v in (LOAD_SETTINGS | settings).items())
        + TOPOLOGY_VALUES[topology],
        encoding="utf-8",
    )
    mongo = backends["mongo"]
    own = (
        cl.own_databases(launcher_module(), mongo, DATABASE)
        if mongo.extra.get("handler") == "postgresql"
        else {}
    )
    urls = cl.Backends(
        backends["nats"].url, mongo.url, backends["opensearch"].url, mongo_services=own
    )
    plan = cl.local_plan(
        Helm(binary), urls, workdir, database=DATABASE, values=(cl.LOOPBACK_VALUES, values)
    )
    return plan, own


def _serve_plan(
    workdir: Path, backends: dict[str, Any], settings: dict[str, str], topology: str = "remote"
) -> Any:
    """`engram serve` of storage, indexer, search and workspace, configured here (no quota
    or authz process: storage charges in process, whatever `topology` says)."""
    cl = cluster_module()
    from tests.support.tokens import service_token

    secret = secrets.token_urlsafe(48)
    token = service_token("engram-services", secret=secret)
    names = ("storage", "indexer", "search", "workspace")
    ports = iter(cl.free_ports(2 * len(names)))
    specs: dict[str, Any] = {}
    for name in names:
        grpc_port, metrics_port = next(ports), next(ports)
        specs[name] = cl.Spec(name, ["engram", "serve", name], {}, grpc_port, metrics_port)
    common = {
        "ENGRAM_MONGO_URI": backends["mongo"].url,
        "ENGRAM_MONGO_DB": DATABASE,
        "ENGRAM_NATS_URL": backends["nats"].url,
        "ENGRAM_OPENSEARCH_URL": backends["opensearch"].url,
        "ENGRAM_OPENSEARCH_INDEX": "engram-load-chunks",
        "ENGRAM_OPENSEARCH_REPLICAS": "0",
        "ENGRAM_VECTOR_DIR": str(workdir / "vectors"),
        "ENGRAM_JWT_SECRET": secret,
        "ENGRAM_SERVICE_TOKEN": token,
        "ENGRAM_STORAGE_ADDR": specs["storage"].address,
        "ENGRAM_SEARCH_ADDR": specs["search"].address,
        "ENGRAM_EMBED_THREADS": "1",
        "ENGRAM_HEALTH_PROBE_SECONDS": "0.5",
        **LOAD_SETTINGS,
        **settings,
    }
    for spec in specs.values():
        spec.env.update(common)
        spec.env.update(
            ENGRAM_GRPC_HOST="127.0.0.1",
            ENGRAM_GRPC_PORT=str(spec.grpc_port),
            ENGRAM_METRICS_HOST="127.0.0.1",
            ENGRAM_METRICS_PORT=str(spec.metrics_port),
        )
    return cl.Plan(specs, secret, token, workdir)


def _probe(plan: Any, workdir: Path, names: str) -> None:
    """Runs the engram processes named in `names` (comma-separated, from $LOAD_PROBE) under
    bench/quota_hop_probe.py: timers around a write's charge and every MongoDB command's
    round trip, written to `workdir/probe-<name>.json` on SIGUSR1 (a diagnosis aid; signal
    it only once it serves: before the probe installs its handler, SIGUSR1 ends it)."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        spec = plan.specs[name]
        if spec.argv[0] != "engram":
            raise RuntimeError(f"{name} runs {spec.argv}, not engram")
        spec.argv = [sys.executable, str(ROOT / "bench" / "quota_hop_probe.py"), *spec.argv[1:]]
        spec.env["QUOTA_HOP_PROBE_OUT"] = str(workdir / f"probe-{name}.json")


@contextlib.contextmanager
def real(
    workdir: Path,
    *,
    plan: str = "auto",
    settings: dict[str, str] | None = None,
    storage_replicas: int = 1,
    topology: str = "remote",
) -> Iterator[Deployment]:
    """The real backends and engram as separate processes. `plan`: `chart` (the rendered
    chart, needs helm), `serve` (`engram serve` processes configured here), `auto` (chart if
    helm is there)."""
    cl = cluster_module()
    from tests.deploy.chart import helm_binary

    workdir.mkdir(parents=True, exist_ok=True)
    launcher = launcher_module()
    backends = _start_backends(launcher, workdir / "backends")
    try:
        use_chart = plan == "chart" or (plan == "auto" and helm_binary() is not None)
        own: dict[str, tuple[str, str]] = {}
        if use_chart:
            built, own = _chart_plan(workdir, backends, settings or {}, topology)
        else:
            built = _serve_plan(workdir, backends, settings or {}, topology)
    except BaseException:
        for backend in backends.values():
            backend.stop()
        raise
    _probe(built, workdir, os.environ.get("LOAD_PROBE", ""))
    if storage_replicas > 1:
        from loadlib.faults import add_storage_replica

        add_storage_replica(built, cl.free_ports)
    cluster = cl.Cluster(built)
    addresses = {s: built.specs[s].address for s in ("storage", "search", "workspace", "indexer")}
    deployment = Deployment(
        "real",
        workdir,
        built.secret,
        addresses,
        cluster,
        tls=_client_tls(built, workdir),
        backends=backends,
        launcher=launcher,
        # The indexer's embedding cache is in the indexer's own database when it has one,
        # written with its own credentials (a table the superuser made there would not be
        # the indexer's to read).
        store=(
            {"mongo_uri": own["indexer"][0], "mongo_db": own["indexer"][1]}
            if "indexer" in own
            else {"mongo_uri": backends["mongo"].url, "mongo_db": DATABASE}
        ),
    )
    try:
        cluster.start_all()
        yield deployment
    finally:
        deployment.stop()


@contextlib.contextmanager
def deployed(
    target: str,
    workdir: Path,
    *,
    plan: str = "auto",
    settings: dict[str, str] | None = None,
    storage_replicas: int = 1,
    topology: str = "remote",
) -> Iterator[Deployment]:
    if target == "dev":
        with dev(workdir, settings=settings) as deployment:
            yield deployment
    elif target == "real":
        with real(
            workdir,
            plan=plan,
            settings=settings,
            storage_replicas=storage_replicas,
            topology=topology,
        ) as deployment:
            yield deployment
    else:
        raise ValueError(f"unknown target {target!r} (dev or real)")


def wait(condition: Any, *, timeout: float, interval: float = 0.5, what: str = "") -> None:
    """Polls `condition()` until true, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what or 'condition'} not met within {timeout:.0f}s")
        time.sleep(interval)


def tree_copy(source: Path, destination: Path) -> None:
    """Copies `source` to `destination` (replaced), keeping each entry's owner when we are
    root: PostgreSQL's data directory belongs to the unprivileged user it runs as, and a
    root-owned copy would not start."""
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(source, destination, symlinks=True)
    if os.geteuid() != 0:
        return
    for folder, dirs, files in os.walk(source):
        for name in [".", *dirs, *files]:
            found = Path(folder) / name
            info = found.lstat()
            copy = destination / found.relative_to(source)
            if copy.lstat().st_uid != info.st_uid or copy.lstat().st_gid != info.st_gid:
                os.lchown(copy, info.st_uid, info.st_gid)


def environment_note() -> dict[str, str]:
    return (
        {k: v for k, v in LOAD_SETTINGS.items()}
        | {"python": sys.version.split()[0]}
        | {"cpus": str(os.cpu_count())}
    )
