#!/usr/bin/env python3
"""engram as separate processes on loopback, configured by the rendered Helm chart.

`helm template` renders helm/engram with helm/engram/ci/loopback-values.yaml plus the local
backends' real URLs, a JWT secret and a service token minted for it. Each rendered
Deployment becomes one process: the container's command and arguments, run from this
virtualenv, with the environment its ConfigMap and Secret give it. Only what loopback
requires is changed, and each change is listed in `Plan.changes`:

* every process binds 127.0.0.1 on ports of its own (the chart gives them all 50051/9464;
  the MCP server's `--host`/`--port` arguments likewise);
* a peer's Kubernetes DNS name (`engram-storage.memory.svc:50051`) becomes its local port;
* a volume's mount path becomes a directory of the process's own (an emptyDir an empty one,
  a ConfigMap or Secret volume its files), in environment values that name it.

As the chart's default does, each service gets MongoDB credentials and a database of its
own (a PostgreSQL role behind the local FerretDB that may use that database only), given
through the chart's values like any install's.

Anything else the chart sets reaches the process unchanged, so a chart that configures a
service wrongly gives a process that fails here. `make cluster-local` runs it for people:

    python deploy/local/cluster.py [--dir DIR]    # Ctrl-C stops everything

The deploy tests (tests/deploy/test_cluster.py) use `plan` and `Cluster` the same way.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tests.deploy.chart import CHART, NAMESPACE, Helm, Manifest, helm_binary, processes  # noqa: E402
from tests.support.certs import TestCa  # noqa: E402
from tests.support.tokens import mint, service_token  # noqa: E402

LOOPBACK_VALUES = CHART / "ci" / "loopback-values.yaml"
# Started in waves: a wave's processes start together once the previous wave is SERVING.
# The indexer opens the shared vector directory before search and maintenance do
# (numpy_index.py: start processes one after another when the directory is new).
WAVES = (
    ("authz", "quota", "storage"),
    ("indexer",),
    ("search", "workspace", "maintenance", "mcp"),
)
START_TIMEOUT = 120.0
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Backends:
    """URLs of the running backends (deploy/local)."""

    nats: str
    mongo: str
    opensearch: str
    # Each service's own MongoDB URI and database, whose credentials reach that database
    # only (`own_databases`); empty: every service shares `mongo`.
    mongo_services: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def own_databases(launcher: Any, mongo: Any, prefix: str) -> dict[str, tuple[str, str]]:
    """A database and credentials of its own for each service that keeps data on MongoDB
    (deploy/local/backends.py's provision_service_databases on the running FerretDB
    `mongo`): service -> (URI, database)."""
    provisioned = launcher.provision_service_databases(mongo, prefix, launcher.MONGO_SERVICES)
    return {name: (d.uri, d.database) for name, d in provisioned.items()}


@dataclass
class Spec:
    """One process: what its Deployment runs, made to run on loopback."""

    component: str
    argv: list[str]
    env: dict[str, str]
    grpc_port: int
    metrics_port: int
    # False for a process serving HTTP (the MCP server): its port is `grpc_port` anyway.
    grpc: bool = True
    # Every setting (or `--flag` argument) changed from the rendered value: name ->
    # (rendered, local).
    changes: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


@dataclass(frozen=True)
class ClientTls:
    """What a client of the local system needs when the chart turns TLS on."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)


@dataclass
class Plan:
    specs: dict[str, Spec]
    secret: str
    token: str
    workdir: Path
    tls: ClientTls | None = None

    def channel(self, name: str) -> grpc.Channel:
        address = self.specs[name].address
        if self.tls is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, self.tls.credentials())


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports on 127.0.0.1 (all sockets held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def render(
    helm: Helm,
    backends: Backends,
    workdir: Path,
    *,
    secret: str,
    token: str,
    values: Sequence[Path] = (LOOPBACK_VALUES,),
    database: str = "engram_local",
) -> list[Manifest]:
    """The chart rendered with `values` plus the backends, the secret and the token."""
    mongodb: dict[str, Any] = {"perService": False, "uri": backends.mongo, "database": database}
    if backends.mongo_services:
        mongodb = {
            "perService": True,
            "database": database,
            "services": {
                name: {"uri": uri, "database": own}
                for name, (uri, own) in backends.mongo_services.items()
            },
        }
    overrides: dict[str, Any] = {
        "mongodb": mongodb,
        "nats": {"url": backends.nats},
        "opensearch": {"url": backends.opensearch, "index": f"{database}-chunks"},
        "auth": {"jwtSecret": secret, "serviceToken": token},
        # The MCP server's own principal, when the values enable it.
        "mcp": {"token": mint("mcp-agent", "acme", "member", secret=secret)},
        "config": {"ENGRAM_VECTOR_DIR": str(workdir / "vectors")},
    }
    # helm merges maps key by key: the values files' other settings stay.
    return helm.render(list(values), overrides, tmp=workdir)


def _volume_files(
    volume: Mapping[str, Any], docs: Sequence[Manifest], existing: Mapping[str, Mapping[str, bytes]]
) -> dict[str, bytes]:
    """The files a ConfigMap or Secret volume holds (an emptyDir holds none); a Secret the
    chart does not render (an existingSecret) comes from `existing`."""
    if "configMap" in volume or "secret" in volume:
        kind, source = (
            ("ConfigMap", volume["configMap"])
            if "configMap" in volume
            else ("Secret", volume["secret"])
        )
        name = source.get("name") or source.get("secretName")
        found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
        if kind == "Secret" and not found and name in existing:
            data = dict(existing[name])
        elif len(found) == 1:
            data = {k: v.encode() for k, v in (found[0].get("data") or {}).items()}
            if kind == "Secret":
                data = {k: base64.b64decode(v) for k, v in data.items()}
        else:
            raise ValueError(f"volume {volume['name']}: {kind} {name} is not rendered or given")
        items = source.get("items")
        if items:
            return {item["path"]: data[item["key"]] for item in items}
        return data
    if "emptyDir" in volume:
        return {}
    raise ValueError(f"volume {volume['name']}: only emptyDir, configMap and secret run here")


def plan(
    docs: Sequence[Manifest],
    workdir: Path,
    *,
    secret: str,
    token: str,
    existing: Mapping[str, Mapping[str, bytes]] | None = None,
    tls: ClientTls | None = None,
) -> Plan:
    """Each rendered Deployment as a process on loopback (see the module's docstring).
    `existing` holds the files of Secrets the chart refers to but does not create."""
    found = processes(docs)
    ports = iter(free_ports(2 * len(found)))
    specs = {
        name: Spec(name, list(p.argv), dict(p.env), next(ports), next(ports))
        for name, p in found.items()
    }
    peers: dict[str, str] = {}
    for service in (d for d in docs if d["kind"] == "Service"):
        component = service["metadata"]["labels"].get("app.kubernetes.io/component")
        if component not in specs:
            continue
        name = service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            if port.get("name") != "grpc":
                continue
            for host in (
                name,
                f"{name}.{NAMESPACE}",
                f"{name}.{NAMESPACE}.svc",
                f"{name}.{NAMESPACE}.svc.cluster.local",
            ):
                peers[f"{host}:{port['port']}"] = specs[component].address
    peer_pattern = re.compile(
        "|".join(re.escape(k) for k in sorted(peers, key=len, reverse=True)) or "(?!)"
    )
    deployments = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in docs
        if d["kind"] == "Deployment"
    }
    for name, spec in specs.items():
        pod = deployments[name]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts", []):
            local = workdir / name / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            files = _volume_files(volumes[mount["name"]], docs, existing or {})
            for relative, content in files.items():
                (local / relative).parent.mkdir(parents=True, exist_ok=True)
                (local / relative).write_bytes(content)
            mounts[mount["mountPath"].rstrip("/")] = local
        spec.grpc = any(port.get("name") == "grpc" for port in container.get("ports", []))
        local_env = {}
        if spec.grpc:
            local_env = {
                "ENGRAM_GRPC_HOST": "127.0.0.1",
                "ENGRAM_GRPC_PORT": str(spec.grpc_port),
                "ENGRAM_METRICS_HOST": "127.0.0.1",
                "ENGRAM_METRICS_PORT": str(spec.metrics_port),
            }
        for flag, value in (("--host", "127.0.0.1"), ("--port", str(spec.grpc_port))):
            if flag in spec.argv[:-1]:
                at = spec.argv.index(flag) + 1
                spec.changes[flag] = (spec.argv[at], value)
                spec.argv[at] = value
        for variable, value in spec.env.items():
            new = peer_pattern.sub(lambda m: peers[m.group(0)], value)
            for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
                if new.startswith(str(workdir)):
                    break  # a local path given at render time (under /tmp, say)
                if new == mount_path or new.startswith(mount_path + "/"):
                    new = str(local) + new[len(mount_path) :]
                    break
            local_env.setdefault(variable, new)
        for variable, value in local_env.items():
            rendered = spec.env.get(variable, "")
            if value != rendered:
                spec.changes[variable] = (rendered, value)
            spec.env[variable] = value
        left = [f"{k}={v}" for k, v in spec.env.items() if ".svc" in v]
        if left:
            raise ValueError(f"{name}: a cluster address has no local process: {left}")
    return Plan(specs, secret, token, workdir, tls)


# Execs its arguments after asking the kernel to SIGKILL it when its parent dies (Linux), so
# a started process dies with the one that started it, even on SIGKILL. A separate program
# rather than Popen's preexec_fn: running Python between fork and exec in a parent whose
# gRPC threads are busy lets gRPC's fork handlers abort the child (seen: SIGABRT on a
# restart, "epoll_wait error: Bad file descriptor"); without preexec_fn Popen uses vfork.
DIE_WITH_PARENT = (
    "import contextlib, ctypes, os, signal, sys\n"
    "with contextlib.suppress(OSError, AttributeError):\n"
    f"    ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


class Cluster:
    """The planned processes: started, checked, killed, restarted and stopped by name."""

    def __init__(self, plan: Plan, *, bin_dir: Path | None = None) -> None:
        self.plan = plan
        self.bin_dir = bin_dir or Path(sys.executable).parent
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.exit_codes: dict[str, int] = {}

    def log(self, name: str) -> Path:
        return self.plan.workdir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            text = self.log(name).read_text(errors="replace").splitlines()
            return f"--- {name} ---\n" + "\n".join(text[-lines:])
        return f"--- {name}: no log ---"

    def start(self, name: str) -> None:
        """Starts one process as its Deployment would (output appended to its log)."""
        spec = self.plan.specs[name]
        program = shutil.which(spec.argv[0], path=str(self.bin_dir))
        if program is None:
            raise FileNotFoundError(f"{spec.argv[0]} is not in {self.bin_dir}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "OTEL_"))}
        env.update(spec.env)
        with self.log(name).open("ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-c", DIE_WITH_PARENT, program, *spec.argv[1:]],
                env=env,
                cwd=self.plan.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.exit_codes.pop(name, None)

    def serving(self, name: str, timeout: float = 2.0) -> bool:
        """One grpc.health.v1 Check of the whole server (an HTTP server: it listens)."""
        if not self.plan.specs[name].grpc:
            try:
                socket.create_connection(
                    ("127.0.0.1", self.plan.specs[name].grpc_port), timeout
                ).close()
            except OSError:
                return False
            return True
        with self.plan.channel(name) as channel:
            try:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=timeout
                )
            except grpc.RpcError:
                return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

    def wait_serving(self, names: Sequence[str], timeout: float = START_TIMEOUT) -> None:
        """Until each is SERVING; a process that exits or overruns fails with its log."""
        deadline = time.monotonic() + timeout
        waiting = list(names)
        while waiting:
            for name in list(waiting):
                code = self.procs[name].poll()
                if code is not None:
                    raise RuntimeError(f"{name} exited with {code}\n{self.log_tail(name)}")
                if self.serving(name):
                    waiting.remove(name)
            if waiting and time.monotonic() > deadline:
                tails = "\n".join(self.log_tail(n) for n in waiting)
                raise TimeoutError(f"not SERVING after {timeout:.0f}s: {waiting}\n{tails}")
            if waiting:
                time.sleep(0.2)

    def start_all(self, timeout: float = START_TIMEOUT) -> None:
        planned = list(self.plan.specs)
        waves = [[n for n in wave if n in planned] for wave in WAVES]
        waves.append([n for n in planned if not any(n in w for w in WAVES)])
        for wave in (w for w in waves if w):
            for name in wave:
                self.start(name)
            self.wait_serving(wave, timeout)

    def kill(self, name: str) -> None:
        """SIGKILL, as a node failure would."""
        proc = self.procs[name]
        proc.kill()
        self.exit_codes[name] = proc.wait(timeout=10)

    def stop(self, names: Sequence[str] | None = None, *, grace: float = 30.0) -> dict[str, int]:
        """SIGTERM each, as Kubernetes does, then wait up to `grace` (then SIGKILL: -9)."""
        chosen = [n for n in (names or list(self.procs)) if self.procs[n].poll() is None]
        for name in chosen:
            self.procs[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for name in chosen:
            try:
                self.exit_codes[name] = self.procs[name].wait(
                    timeout=max(0.1, deadline - time.monotonic())
                )
            except subprocess.TimeoutExpired:
                self.procs[name].kill()
                self.exit_codes[name] = self.procs[name].wait(timeout=10)
        return {n: self.exit_codes[n] for n in chosen}

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]


def local_plan(
    helm: Helm,
    backends: Backends,
    workdir: Path,
    *,
    secret: str | None = None,
    database: str = "engram_local",
    values: Sequence[Path] = (LOOPBACK_VALUES,),
) -> Plan:
    """A service token for the secret (a fresh one by default), the chart rendered and
    planned. When the values turn TLS on, the TLS Secret they name is made here, as an
    operator (or cert-manager) would: a CA and one certificate for 127.0.0.1 and
    localhost, usable as server and client certificate (mTLS)."""
    secret = secret or secrets.token_urlsafe(48)
    token = service_token("engram-services", secret=secret)
    docs = render(
        helm, backends, workdir, secret=secret, token=token, values=values, database=database
    )
    existing: dict[str, dict[str, bytes]] = {}
    tls = None
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    for volume in deployment["spec"]["template"]["spec"].get("volumes", []):
        if volume["name"] == "tls":
            directory = workdir / "certificates"
            directory.mkdir(parents=True, exist_ok=True)
            ca = TestCa(directory)
            pair = ca.issue("engram", server=True, client=True)
            files = {
                "ca.crt": ca.path.read_bytes(),
                "tls.crt": pair.cert.read_bytes(),
                "tls.key": pair.key.read_bytes(),
            }
            existing[volume["secret"]["secretName"]] = files
            tls = ClientTls(files["ca.crt"], files["tls.crt"], files["tls.key"])
    return plan(docs, workdir, secret=secret, token=token, existing=existing, tls=tls)


@contextlib.contextmanager
def _backends(root: Path) -> Iterator[Backends]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backends as launcher  # deploy/local/backends.py

    launcher.bind_to_this_process()
    launcher.require_provisioned(["nats", "mongo", "opensearch"])
    running = []
    try:
        for name in ("nats", "mongo", "opensearch"):
            (root / name).mkdir(parents=True, exist_ok=True)
            print(f"starting {name} ...", flush=True)
            running.append(getattr(launcher, f"start_{name}")(root / name))
        mongo = running[1]
        # FerretDB on SQLite has no users: there every service shares one database.
        postgresql = mongo.extra.get("handler") == "postgresql"
        own = own_databases(launcher, mongo, "engram_local") if postgresql else {}
        yield Backends(*(b.url for b in running), mongo_services=own)
    finally:
        for backend in running:
            backend.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="state and logs (default: a temporary one)")
    args = parser.parse_args(argv)
    binary = helm_binary()
    if binary is None:
        print("helm is not installed: run `make helm-install`", file=sys.stderr)
        return 1
    # Ctrl-C, and SIGTERM (or SIGINT where a shell started us in the background with it
    # ignored), stop everything the same way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="engram-cluster-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with _backends(workdir / "backends") as backends:
        local = local_plan(Helm(binary), backends, workdir)
        cluster = Cluster(local)
        try:
            cluster.start_all()
            print(f"\nengram is running as {len(local.specs)} processes (logs in {workdir}):")
            for name, spec in local.specs.items():
                if spec.grpc:
                    print(
                        f"  {name:<10} {spec.address}  metrics http://127.0.0.1:{spec.metrics_port}"
                    )
                else:
                    print(f"  {name:<10} http://{spec.address}/mcp")
            admin = mint("admin", "acme", "admin", secret=local.secret, ttl=86400)
            print(f"\nadmin of tenant acme (24 h):\n  export ENGRAM_TOKEN={admin}")
            print(f"  export ENGRAM_ADDR={local.specs['storage'].address}")
            if local.tls is not None:
                certificates = workdir / "certificates"
                print(f"  export ENGRAM_TLS_CA_FILE={certificates / 'ca.pem'}")
                print(f"  export ENGRAM_TLS_CLIENT_CERT_FILE={certificates / 'engram.crt'}")
                print(f"  export ENGRAM_TLS_CLIENT_KEY_FILE={certificates / 'engram.key'}")
            print("\nCtrl-C stops everything.", flush=True)
            while not (gone := [n for n in local.specs if n not in cluster.alive()]):
                time.sleep(1)
            print(f"stopped unexpectedly: {gone}", file=sys.stderr)
            for name in gone:
                print(cluster.log_tail(name), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nstopping ...", flush=True)
            return 0
        finally:
            codes = cluster.stop()
            print("exit codes: " + ", ".join(f"{n} {c}" for n, c in codes.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
