#!/usr/bin/env python3
"""Provision, start and stop the real local backends engram's tests and local runs use.

Backends (all bound to 127.0.0.1 only):

* ``nats``       -- nats-server v2.15.2 with JetStream (built with ``go install``).
* ``mongo``      -- FerretDB v1.24.2 (MongoDB wire protocol) on its own PostgreSQL server
                    (Debian's ``postgresql`` package, our own data dir); the SQLite handler
                    stays selectable (``ENGRAM_LOCAL_MONGO_HANDLER=sqlite``).
* ``opensearch`` -- OpenSearch 2.19.6, one node started by our own launcher
                    (``deploy/local/opensearch``) from Maven Central artifacts.

Everything that is downloaded or built lives under ``~/.cache/engram`` (override with
``ENGRAM_CACHE_DIR``); a second :func:`provision` with a complete cache touches no network
and takes well under a second.

Library use (stdlib only, importable as a plain file)::

    sys.path.insert(0, "deploy/local"); import backends
    backends.provision()
    nats = backends.start_nats(tmp / "nats")
    ...
    nats.stop()
    nats = backends.start_nats(tmp / "nats", port=nats.port)   # same port, same streams

CLI::

    python deploy/local/backends.py start  [--dir DIR] [--only nats,mongo,opensearch]
    python deploy/local/backends.py status [--dir DIR]
    python deploy/local/backends.py stop   [--dir DIR]
    python deploy/local/backends.py provision [--only ...]
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NATS_VERSION = "v2.15.2"
FERRETDB_VERSION = "v1.24.2"
OPENSEARCH_VERSION = "2.19.6"

BACKEND_NAMES: tuple[str, ...] = ("nats", "mongo", "opensearch")
ENV_VARS: dict[str, str] = {
    "nats": "ENGRAM_TEST_NATS_URL",
    "mongo": "ENGRAM_TEST_MONGO_URI",
    "opensearch": "ENGRAM_TEST_OPENSEARCH_URL",
}

HERE = Path(__file__).resolve().parent
OPENSEARCH_SRC = HERE / "opensearch"
OPENSEARCH_JAR = "engram-local-opensearch.jar"
OPENSEARCH_MAIN = "dev.engram.opensearch.LocalNode"
OPENSEARCH_HEAP = "512m"

LOG_TAIL_LINES = 40

# FerretDB's storage ("handler"): PostgreSQL (the default) or SQLite.
MONGO_HANDLERS: tuple[str, ...] = ("postgresql", "sqlite")
MONGO_HANDLER_ENV = "ENGRAM_LOCAL_MONGO_HANDLER"
POSTGRESQL_LIB = Path("/usr/lib/postgresql")
POSTGRESQL_APT = "apt-get update && apt-get install -y --no-install-recommends postgresql"
PG_USER = "engram"  # the cluster's superuser (initdb -U), trust auth on 127.0.0.1 only
# Who may log in, and how: the superuser without a password (every test and tool that uses
# the backend unauthenticated reaches it as this user), every other role (a service's own,
# see provision_service_databases) only with its password.
PG_HBA = f"""\
local all {PG_USER} trust
host  all {PG_USER} 127.0.0.1/32 trust
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
"""
PG_DATABASE = "postgres"  # FerretDB keeps each MongoDB database as a schema of this one
PG_RUN_AS = "nobody"  # PostgreSQL refuses to run as root: as root we run it as this user
# FerretDB v1's PostgreSQL handler holds one pooled connection for an update's read while it
# takes a second for the write: with as many concurrent updates/deletes as the pool has
# connections (its default pool_max_conns is 50), every one waits for a second connection
# and FerretDB hangs for good. A pool larger than engram's clients can keep busy avoids it.
# FerretDB keeps one such pool per user: with each service on its own role
# (provision_service_databases) several pools fill at once, so the server allows more
# connections than one pool takes (each slot costs PostgreSQL a little shared memory only).
PG_MAX_CONNECTIONS = 1000
FERRETDB_PG_POOL = 380

# FerretDB v1 filters on a field as `_jsonb->$1 @> $2` (`_id` lookups included) and indexes
# fields with btree indexes on `(_jsonb->'f')`, which `@>` cannot use: every query scans its
# table, so a write's cost grows with the collection. An event trigger gives each such index
# a GIN (jsonb_path_ops) companion per key, which `@>` can use once the planner sees the key
# as a constant (plan_cache_mode=force_custom_plan; FerretDB prepares its statements).
# FerretDB does not know these indexes: they cost each write a little and answer its queries.
PG_GIN_TRIGGER_SQL = r"""
CREATE OR REPLACE FUNCTION public.engram_ferretdb_gin() RETURNS event_trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  cmd record;
  idx record;
  expr text;
  i int;
BEGIN
  FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE INDEX' LOOP
    SELECT ci.relname AS iname, n.nspname AS nsp, ct.relname AS tname, am.amname AS am,
           ix.indexrelid AS oid, ix.indnkeyatts AS nkeys
      INTO idx
      FROM pg_index ix
      JOIN pg_class ci ON ci.oid = ix.indexrelid
      JOIN pg_class ct ON ct.oid = ix.indrelid
      JOIN pg_namespace n ON n.oid = ct.relnamespace
      JOIN pg_am am ON am.oid = ci.relam
     WHERE ix.indexrelid = cmd.objid;
    CONTINUE WHEN NOT FOUND OR idx.am <> 'btree'
                  OR idx.nsp IN ('pg_catalog', 'information_schema', 'public');
    FOR i IN 1..idx.nkeys LOOP
      expr := pg_get_indexdef(idx.oid, i, false);
      CONTINUE WHEN position('_jsonb -> ' in expr) = 0;
      EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I.%I USING gin (%s jsonb_path_ops) WITH (fastupdate = off)',
                     left(idx.iname, 55) || '_gin' || i, idx.nsp, idx.tname, expr);
    END LOOP;
  END LOOP;
END
$fn$;
DROP EVENT TRIGGER IF EXISTS engram_ferretdb_gin;
CREATE EVENT TRIGGER engram_ferretdb_gin ON ddl_command_end WHEN TAG IN ('CREATE INDEX')
  EXECUTE FUNCTION public.engram_ferretdb_gin();
"""


def cache_dir() -> Path:
    """Root of everything provisioned: ``$ENGRAM_CACHE_DIR`` or ``~/.cache/engram``."""
    return Path(os.environ.get("ENGRAM_CACHE_DIR") or "~/.cache/engram").expanduser()


def bin_dir() -> Path:
    return cache_dir() / "bin"


def opensearch_dir() -> Path:
    return cache_dir() / f"opensearch-{OPENSEARCH_VERSION}"


class BackendError(RuntimeError):
    """A backend could not be provisioned, started or stopped."""


class ProvisionError(BackendError):
    """Building or fetching a backend failed, or it was not provisioned yet."""


class BackendStartError(BackendError):
    """A backend did not come up; the message carries the tail of its log."""


def _say(msg: str) -> None:
    print(f"[engram-backends] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# small helpers


def _tail(path: Path, lines: int = LOG_TAIL_LINES, since: int = 0) -> str:
    try:
        with path.open("rb") as f:
            f.seek(since)
            data = f.read()
    except OSError:
        return f"(no log at {path})"
    text = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(text) if text else f"(log {path} is empty)"


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (all sockets held until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One free TCP port on 127.0.0.1."""
    return _free_ports(1)[0]


def _wait_port_bindable(port: int, timeout: float, name: str) -> None:
    """Wait until 127.0.0.1:port can be bound (with SO_REUSEADDR, as the servers do)."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise BackendStartError(
                        f"{name}: 127.0.0.1:{port} is still in use after {timeout:.0f}s ({e})") from e
        time.sleep(0.1)


# urllib honours http_proxy; never send loopback health checks through a proxy.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with _HTTP.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _make_writable(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)


def _rmtree(path: Path) -> None:
    """rmtree that also copes with read-only trees (Go's module cache copies)."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        _make_writable(path)
        shutil.rmtree(path)
    else:
        path.unlink()


def _run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         what: str) -> str:
    """Run a provisioning command; raise ProvisionError with its output's tail on failure."""
    _say(f"{what}: {' '.join(argv)}")
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-LOG_TAIL_LINES:])
        raise ProvisionError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return out


def _output_of(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None


@contextlib.contextmanager
def _provision_lock() -> Iterator[None]:
    """Serialise provisioning across processes (pytest-xdist workers, parallel CLIs)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".provision.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------
# provisioning


def _find_go() -> str | None:
    go = shutil.which("go")
    if go:
        return go
    if os.access("/usr/local/go/bin/go", os.X_OK):
        return "/usr/local/go/bin/go"
    return None


def _go_env() -> dict[str, str]:
    root = cache_dir()
    env = dict(os.environ)
    env.update(
        GOBIN=str(bin_dir()),
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        # Never fetch another Go toolchain; -modcacherw keeps `rm -rf ~/.cache/engram` working.
        GOTOOLCHAIN="local",
        GOFLAGS="-buildvcs=false -modcacherw",
        # Both servers are pure Go (FerretDB uses modernc.org/sqlite): no C toolchain needed.
        CGO_ENABLED="0",
    )
    return env


def nats_binary() -> Path:
    """The nats-server to run: ours from the cache, else a system one (apt fallback)."""
    ours = bin_dir() / "nats-server"
    if os.access(ours, os.X_OK):
        return ours
    system = shutil.which("nats-server")
    if system:
        return Path(system)
    raise ProvisionError(f"nats-server not provisioned ({ours} missing): run `make backends-install`")


def ferretdb_binary() -> Path:
    ours = bin_dir() / "ferretdb"
    if os.access(ours, os.X_OK):
        return ours
    raise ProvisionError(f"ferretdb not provisioned ({ours} missing): run `make backends-install`")


def _provision_nats() -> None:
    target = bin_dir() / "nats-server"
    out = _output_of([str(target), "--version"]) if os.access(target, os.X_OK) else None
    if out and NATS_VERSION in out:
        return
    go = _find_go()
    if go:
        bin_dir().mkdir(parents=True, exist_ok=True)
        _run([go, "install", f"github.com/nats-io/nats-server/v2@{NATS_VERSION}"],
             env=_go_env(), cwd=cache_dir(), what="building nats-server")
        _drop_go_build_cache()
        return
    if shutil.which("nats-server"):
        return  # no Go: accept the system package (Debian's is older but has JetStream)
    _say("Go not found: falling back to Debian's nats-server package")
    try:
        _run(["apt-get", "install", "-y", "nats-server"], what="apt-get install nats-server")
    except ProvisionError:
        _run(["apt-get", "update"], what="apt-get update")
        _run(["apt-get", "install", "-y", "nats-server"], what="apt-get install nats-server")


def _provision_ferretdb() -> None:
    target = bin_dir() / "ferretdb"
    out = _output_of([str(target), "--version"]) if os.access(target, os.X_OK) else None
    if out and f"version: {FERRETDB_VERSION}" in out:
        return
    go = _find_go()
    if not go:
        raise ProvisionError("FerretDB is built from source and needs Go (go not found on PATH)")
    env = _go_env()
    root = cache_dir()
    # `go install ...@v1.24.2` builds, but the binary panics at start: the module zip lacks
    # build/version/version.txt (generated by FerretDB's own build). So fetch the module and
    # build a writable copy of it with that file written.
    raw = _run([go, "mod", "download", "-json", f"github.com/FerretDB/FerretDB@{FERRETDB_VERSION}"],
               env=env, cwd=root, what="fetching FerretDB module")
    info = json.loads(raw[raw.index("{"):])
    if info.get("Error") or not info.get("Dir"):
        raise ProvisionError(f"go mod download FerretDB failed: {info.get('Error')}")
    src = root / "src" / f"ferretdb-{FERRETDB_VERSION}"
    _rmtree(src)
    src.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(info["Dir"], src, symlinks=True)
    _make_writable(src)
    version_dir = src / "build" / "version"
    (version_dir / "version.txt").write_text(FERRETDB_VERSION + "\n")
    (version_dir / "package.txt").write_text("engram-local\n")
    bin_dir().mkdir(parents=True, exist_ok=True)
    tmp = bin_dir() / f".ferretdb.{os.getpid()}.tmp"
    env.pop("GOBIN")
    try:
        _run([go, "build", "-trimpath", "-o", str(tmp), "./cmd/ferretdb"],
             env=env, cwd=src, what="building ferretdb")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    out = _output_of([str(target), "--version"]) or ""
    if f"version: {FERRETDB_VERSION}" not in out:
        raise ProvisionError(f"built ferretdb does not report {FERRETDB_VERSION}:\n{out}")
    _drop_go_build_cache()


def _drop_go_build_cache() -> None:
    """The compiled-package cache (~500 MB) only speeds up rebuilds; the module cache stays,
    so a rebuild still needs no network."""
    _rmtree(cache_dir() / "go" / "build")


def _opensearch_sources() -> list[Path]:
    files = [OPENSEARCH_SRC / "pom.xml"]
    files += sorted(p for p in (OPENSEARCH_SRC / "src").rglob("*") if p.is_file())
    return files


def opensearch_build_key() -> str:
    """Hash of the launcher's pom.xml and sources: a change means a rebuild."""
    h = hashlib.sha256(OPENSEARCH_VERSION.encode())
    for p in _opensearch_sources():
        h.update(b"\0" + str(p.relative_to(OPENSEARCH_SRC)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _opensearch_ready(key: str) -> bool:
    layout = opensearch_dir()
    stamp = layout / ".build-key"
    return (stamp.is_file() and stamp.read_text().strip() == key
            and (layout / OPENSEARCH_JAR).is_file() and (layout / "lib").is_dir())


def _provision_opensearch() -> None:
    key = opensearch_build_key()
    if _opensearch_ready(key):
        return
    mvn = shutil.which("mvn")
    if not mvn:
        raise ProvisionError("Maven (mvn) not found on PATH: needed to assemble OpenSearch")
    _java_binary()
    root = cache_dir()
    build = root / "build" / "opensearch"
    _rmtree(build)
    build.mkdir(parents=True)
    shutil.copy2(OPENSEARCH_SRC / "pom.xml", build / "pom.xml")
    shutil.copytree(OPENSEARCH_SRC / "src", build / "src")
    _run([mvn, "-q", "-B", f"-Dmaven.repo.local={root / 'm2'}", "package"],
         cwd=build, what=f"assembling OpenSearch {OPENSEARCH_VERSION} launcher")
    staging = root / f".opensearch-{OPENSEARCH_VERSION}.{os.getpid()}.new"
    _rmtree(staging)
    staging.mkdir()
    shutil.copy2(build / "target" / OPENSEARCH_JAR, staging / OPENSEARCH_JAR)
    shutil.copytree(build / "target" / "lib", staging / "lib")
    (staging / ".build-key").write_text(key + "\n")
    final = opensearch_dir()
    old = root / f".opensearch-{OPENSEARCH_VERSION}.{os.getpid()}.old"
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    _rmtree(old)
    _rmtree(build / "target")


def mongo_handler(handler: str | None = None) -> str:
    """The FerretDB handler to use: ``handler``, else ``$ENGRAM_LOCAL_MONGO_HANDLER``, else
    ``postgresql``."""
    chosen = (handler or os.environ.get(MONGO_HANDLER_ENV) or "postgresql").strip().lower()
    if chosen not in MONGO_HANDLERS:
        raise ValueError(f"unknown FerretDB handler {chosen!r}; expected one of "
                         f"{', '.join(MONGO_HANDLERS)} (from {MONGO_HANDLER_ENV} or handler=)")
    return chosen


def postgresql_bin_dir() -> Path | None:
    """The newest Debian PostgreSQL server install (``/usr/lib/postgresql/<v>/bin``), if any."""
    found: list[tuple[int, Path]] = []
    with contextlib.suppress(OSError):
        for entry in POSTGRESQL_LIB.iterdir():
            bin_path = entry / "bin"
            if entry.name.isdigit() and all(os.access(bin_path / tool, os.X_OK)
                                            for tool in ("initdb", "postgres", "pg_isready")):
                found.append((int(entry.name), bin_path))
    return max(found)[1] if found else None


def _provision_postgresql() -> None:
    """Debian's PostgreSQL server binaries (we never use the distro's cluster or service)."""
    if postgresql_bin_dir() is not None:
        return
    if os.geteuid() != 0:
        raise ProvisionError(f"PostgreSQL server not installed (no {POSTGRESQL_LIB}/<v>/bin/"
                             "initdb); FerretDB's default handler needs it. As root run: "
                             + POSTGRESQL_APT)
    if not shutil.which("apt-get"):
        raise ProvisionError("PostgreSQL server not installed and apt-get not found: install "
                             f"PostgreSQL so that {POSTGRESQL_LIB}/<v>/bin/initdb exists")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["apt-get", "update"], env=env, what="apt-get update")
    _run(["apt-get", "install", "-y", "--no-install-recommends", "postgresql"], env=env,
         what="apt-get install postgresql")
    if postgresql_bin_dir() is None:
        raise ProvisionError(f"apt-get installed postgresql but {POSTGRESQL_LIB}/<v>/bin/initdb "
                             "is still missing")


def _provision_mongo() -> None:
    _provision_ferretdb()
    if mongo_handler() == "postgresql":
        _provision_postgresql()


_PROVISIONERS: dict[str, Callable[[], None]] = {
    "nats": _provision_nats,
    "mongo": _provision_mongo,
    "opensearch": _provision_opensearch,
}


def _check_names(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if n not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {n!r}; expected one of {', '.join(BACKEND_NAMES)}")
        if n not in out:
            out.append(n)
    return out


def is_provisioned(name: str) -> bool:
    """Is ``name`` built and current in the cache (no network, no build, well under a second)?"""
    _check_names([name])
    if name == "nats":
        target = bin_dir() / "nats-server"
        if os.access(target, os.X_OK):
            return NATS_VERSION in (_output_of([str(target), "--version"]) or "")
        return shutil.which("nats-server") is not None
    if name == "mongo":
        target = bin_dir() / "ferretdb"
        if mongo_handler() == "postgresql" and postgresql_bin_dir() is None:
            return False
        return os.access(target, os.X_OK) and (
            f"version: {FERRETDB_VERSION}" in (_output_of([str(target), "--version"]) or ""))
    return _opensearch_ready(opensearch_build_key())


def require_provisioned(names: Iterable[str]) -> None:
    """Raise ProvisionError at once, naming the fix, if any of ``names`` is not built.

    Starting a backend never builds one: building is `make backends-install`'s job, which has
    no timeout to race (tests have a per-test one)."""
    missing = [n for n in _check_names(names) if not is_provisioned(n)]
    if missing:
        raise ProvisionError(
            f"{', '.join(missing)} not built in {cache_dir()}: run `make backends-install` "
            "(builds NATS, FerretDB and OpenSearch once, installs PostgreSQL; needs Go, Java 17 "
            "and Maven)")


# What each backend's build needs, and how to get it on Debian (the machine's registry).
_TOOL_HINTS: dict[str, str] = {
    "go": "Go >= 1.24 (builds NATS and FerretDB): apt-get install golang-go, or the Go toolchain "
          "on PATH / in /usr/local/go/bin",
    "java": "Java 17 (runs OpenSearch 2.19): apt-get install openjdk-17-jdk-headless, or set "
            "JAVA_HOME",
    "mvn": "Maven 3 (assembles OpenSearch from Maven Central): apt-get install maven",
    "npm": "npm (installs buf for `make protos-check`): apt-get install npm",
    "postgresql": f"PostgreSQL server (FerretDB's storage; ENGRAM_LOCAL_MONGO_HANDLER=sqlite "
                  f"avoids it): as root, {POSTGRESQL_APT}",
}


def _java_major(java: str) -> int | None:
    """The major version `java -version` reports (``"17.0.15"`` -> 17, ``"1.8.0"`` -> 8)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', _output_of([java, "-version"]) or "")
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def missing_tools(names: Iterable[str], *, npm: bool = False) -> list[str]:
    """The tools the named backends' builds need that this machine lacks, each with its fix.

    A backend already built needs none of them (except Java, which also runs OpenSearch)."""
    wanted = _check_names(names)
    problems: list[str] = []
    if not _find_go():
        # FerretDB is only built from source; NATS falls back to Debian's package.
        if "mongo" in wanted and not is_provisioned("mongo"):
            problems.append(_TOOL_HINTS["go"])
        elif "nats" in wanted and not is_provisioned("nats") and not shutil.which("apt-get"):
            problems.append(_TOOL_HINTS["go"])
    if "opensearch" in wanted:
        try:
            java = _java_binary()
        except ProvisionError:
            problems.append(_TOOL_HINTS["java"])
        else:
            major = _java_major(java)
            if major is None or major < 17:
                problems.append(f"{_TOOL_HINTS['java']} (found {java}: version {major})")
        if not is_provisioned("opensearch") and not shutil.which("mvn"):
            problems.append(_TOOL_HINTS["mvn"])
    if ("mongo" in wanted and mongo_handler() == "postgresql" and postgresql_bin_dir() is None
            and (os.geteuid() != 0 or not shutil.which("apt-get"))):
        problems.append(_TOOL_HINTS["postgresql"])
    if npm and not shutil.which("npm"):
        problems.append(_TOOL_HINTS["npm"])
    return problems


def provision(names: Iterable[str] = BACKEND_NAMES, *, check_npm: bool = False) -> None:
    """Build/fetch the named backends into the cache; a no-op (no network) when cached.

    With ``ENGRAM_BACKENDS_OFFLINE=1`` (set by the test suites) nothing is ever built: a
    missing backend raises ProvisionError naming `make backends-install` instead."""
    wanted = _check_names(names)
    if os.environ.get("ENGRAM_BACKENDS_OFFLINE") == "1":
        require_provisioned(wanted)
        return
    problems = missing_tools(wanted, npm=check_npm)
    if problems:
        raise ProvisionError("missing tools:\n  - " + "\n  - ".join(problems))
    with _provision_lock():
        for name in wanted:
            if is_provisioned(name):
                _say(f"{name}: already built in {cache_dir()}")
                continue
            _say(f"{name}: building (first run: {_BUILD_TIME_HINTS[name]}) ...")
            t0 = time.monotonic()
            _PROVISIONERS[name]()
            _say(f"{name}: built in {time.monotonic() - t0:.1f}s")


_BUILD_TIME_HINTS: dict[str, str] = {
    "nats": "about 1 minute on 2 cores",
    "mongo": "2-4 minutes: the Go modules download, then the build (+ apt-get postgresql)",
    "opensearch": "1-3 minutes: about 120 MB of jars from Maven Central",
}


# --------------------------------------------------------------------------------------
# processes


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses
        rest = data[data.rindex(b")") + 2:].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] != b"Z":
            members.append(int(entry))
    return members


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:].split()[0] != b"Z"


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop_group(pgid: int, proc: "subprocess.Popen[bytes] | None", timeout: float) -> None:
    """SIGTERM the group, wait up to ``timeout``, SIGKILL what is left, reap our child."""

    def gone(limit: float) -> bool:
        deadline = time.monotonic() + limit
        while True:
            if proc is not None:
                proc.poll()
            if not _group_members(pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    if proc is not None and proc.poll() is not None and not _group_members(pgid):
        return  # already gone and reaped: its pid may belong to someone else by now
    _signal_group(pgid, signal.SIGTERM)
    if not gone(timeout):
        _say(f"process group {pgid} ignored SIGTERM for {timeout:.0f}s; sending SIGKILL")
        _signal_group(pgid, signal.SIGKILL)
        if not gone(10.0):
            raise BackendError(f"processes {_group_members(pgid)} of group {pgid} survived SIGKILL")
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


@dataclass
class RunningBackend:
    """A backend process we started. ``stop()`` leaves no process of it behind."""

    name: str  # "nats" | "mongo" | "opensearch"
    url: str  # nats://127.0.0.1:P | mongodb://127.0.0.1:P/ | http://127.0.0.1:P
    pid: int  # also the process group id (each backend runs in its own session)
    data_dir: Path
    log_path: Path
    port: int
    # Other logs worth reading (e.g. the JVM's stdout/stderr for OpenSearch).
    extra_logs: tuple[Path, ...] = ()
    # Secondary endpoints: NATS "monitor_url", OpenSearch "transport_port".
    extra: dict[str, str] = field(default_factory=dict)
    _proc: "subprocess.Popen[bytes] | None" = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return _pid_alive(self.pid)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, wait, then SIGKILL; returns when nothing is left."""
        _stop_group(self.pid, self._proc, timeout)
        _SESSION.forget(self.pid)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = [f"--- {self.log_path} ---\n{_tail(self.log_path, lines)}"]
        parts += [f"--- {p} ---\n{_tail(p, lines)}" for p in self.extra_logs]
        return "\n".join(parts)

    def healthy(self, timeout: float = 2.0) -> bool:
        """One quick health probe (the same one start_* waits on)."""
        if not self.alive():
            return False
        try:
            return _PROBES[self.name](self, timeout)
        except (OSError, ValueError, struct.error):
            return False

    def __enter__(self) -> "RunningBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(argv: list[str], *, cwd: Path, log_path: Path,
           env: dict[str, str] | None = None) -> "subprocess.Popen[bytes]":
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    _SESSION.adopt(proc)
    return proc


class _SessionGuard:
    """Ties every backend this process starts to this process's life, once bound.

    Each backend runs in its own process group (so it survives a Ctrl-C aimed at the
    terminal's group and can be stopped whole). Once :func:`bind_to_this_process` ran, every
    group started afterwards is stopped by an ``atexit`` hook, and, should this process die
    without running it (SIGKILL, ``os._exit``, a crash), by a small reaper process that waits
    on a pipe from us: when the pipe closes it stops the groups it was told about. A start
    interrupted half-way (say by a test timeout) is covered too, because the group is
    registered the moment it is spawned, before the backend answers.
    """

    def __init__(self) -> None:
        self.bound = False
        self.groups: dict[int, "subprocess.Popen[bytes] | None"] = {}
        self._reaper: "subprocess.Popen[bytes] | None" = None

    def bind(self) -> None:
        if self.bound:
            return
        self.bound = True
        self._reaper = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_reap", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
            close_fds=True)
        import atexit

        atexit.register(self._at_exit)

    def adopt(self, proc: "subprocess.Popen[bytes]") -> None:
        if not self.bound:
            return
        self.groups[proc.pid] = proc
        self._tell(f"+{proc.pid}")

    def forget(self, pgid: int) -> None:
        if self.groups.pop(pgid, None) is not None:
            self._tell(f"-{pgid}")

    def stop_all(self) -> None:
        """Stop every group still registered (the atexit path; safe to call twice)."""
        for pgid, proc in list(self.groups.items()):
            with contextlib.suppress(BackendError, OSError):
                _stop_group(pgid, proc, 10.0)
            self.forget(pgid)

    def _at_exit(self) -> None:
        self.stop_all()
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.stdin is not None:
            with contextlib.suppress(OSError):
                reaper.stdin.close()  # EOF: the reaper finds nothing left and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(timeout=15)

    def _tell(self, line: str) -> None:
        reaper = self._reaper
        if reaper is None or reaper.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            reaper.stdin.write(line.encode() + b"\n")
            reaper.stdin.flush()


_SESSION = _SessionGuard()


def bind_to_this_process() -> None:
    """From now on, no backend this process starts outlives it (see :class:`_SessionGuard`).

    For test sessions and benchmarks; the CLI's ``start`` leaves backends detached on purpose."""
    _SESSION.bind()


def _reap(parent: int) -> int:
    """The reaper: read ``+pgid`` / ``-pgid`` lines until the parent's pipe closes, then stop
    every group still listed. Ignores SIGINT/SIGTERM aimed at the terminal or the test run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups: set[int] = set()
    for raw in sys.stdin.buffer:
        line = raw.strip().decode("ascii", "replace")
        if line[:1] == "+" and line[1:].isdigit():
            groups.add(int(line[1:]))
        elif line[:1] == "-" and line[1:].isdigit():
            groups.discard(int(line[1:]))
    for pgid in groups:
        if _group_members(pgid):
            _say(f"process {parent} ended without stopping backend group {pgid}; stopping it")
            with contextlib.suppress(BackendError):
                _stop_group(pgid, None, 10.0)
    return 0


def _wait_ready(backend: RunningBackend, timeout: float, log_offsets: dict[Path, int]) -> None:
    """Poll the backend's probe until it answers; on failure kill it and raise with log tails."""
    deadline = time.monotonic() + timeout
    last: str = "no answer yet"
    probe = _PROBES[backend.name]
    while True:
        if not backend.alive():
            code = backend._proc.returncode if backend._proc is not None else "?"
            _stop_group(backend.pid, backend._proc, 5.0)
            raise BackendStartError(
                f"{backend.name} exited (code {code}) before answering on {backend.url}\n"
                + _tails(backend, log_offsets))
        try:
            if probe(backend, 2.0):
                return
            last = "probe said not ready"
        except (OSError, ValueError, struct.error) as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            _stop_group(backend.pid, backend._proc, 10.0)
            raise BackendStartError(
                f"{backend.name} did not answer on {backend.url} within {timeout:.0f}s "
                f"(last probe: {last})\n" + _tails(backend, log_offsets))
        time.sleep(0.1)


def _tails(backend: RunningBackend, offsets: dict[Path, int]) -> str:
    out = []
    for p in (backend.log_path, *backend.extra_logs):
        out.append(f"--- last {LOG_TAIL_LINES} lines of {p} (this start) ---\n"
                   + _tail(p, LOG_TAIL_LINES, offsets.get(p, 0)))
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# NATS


def _probe_nats(b: RunningBackend, timeout: float) -> bool:
    with socket.create_connection(("127.0.0.1", b.port), timeout=timeout) as s:
        f = s.makefile("rb")
        line = f.readline()
        if not line.startswith(b"INFO "):
            raise ValueError(f"unexpected NATS greeting {line[:80]!r}")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"engram-probe"}\r\nPING\r\n')
        while True:
            line = f.readline()
            if not line:
                raise ValueError("NATS closed the connection before PONG")
            if line.startswith(b"PONG"):
                break
            if line.startswith(b"-ERR"):
                raise ValueError(f"NATS said {line.strip()!r}")
    monitor = b.extra.get("monitor_url")
    if monitor:
        for path in ("/healthz?js-enabled-only=true", "/healthz"):
            status, body = _http_get(monitor + path, timeout)
            if status != 200:
                raise ValueError(f"NATS {path} -> {status} {body[:200]!r}")
    return True


def start_nats(data_dir: Path, port: int | None = None, *, timeout: float = 30.0) -> RunningBackend:
    """nats-server with JetStream, its store under ``data_dir/store``.

    Restarting with the same ``data_dir`` and ``port=previous.port`` keeps the URL and the
    JetStream streams/consumers (file storage)."""
    binary = nats_binary()
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    store = data_dir / "store"
    store.mkdir(exist_ok=True)
    log_path = data_dir / "nats.log"
    if port is not None:
        # A restart on the same port can race the previous listener's release.
        _wait_port_bindable(port, 10.0, "nats")
    client_port = port if port is not None else free_port()
    monitor_port = free_port()
    while monitor_port == client_port:
        monitor_port = free_port()
    conf = data_dir / "nats.conf"
    conf.write_text(
        "# written by deploy/local/backends.py at every start\n"
        "server_name: engram-local\n"
        f"listen: 127.0.0.1:{client_port}\n"
        f"http: 127.0.0.1:{monitor_port}\n"
        "logtime: true\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(str(store))}\n"
        "  max_memory_store: 256MB\n"
        "}\n")
    offsets = {log_path: _file_size(log_path)}
    proc = _spawn([str(binary), "-c", str(conf)], cwd=data_dir, log_path=log_path)
    backend = RunningBackend(
        name="nats", url=f"nats://127.0.0.1:{client_port}", pid=proc.pid, data_dir=data_dir,
        log_path=log_path, port=client_port,
        extra={"monitor_url": f"http://127.0.0.1:{monitor_port}"}, _proc=proc)
    _wait_ready(backend, timeout, offsets)
    return backend


# --------------------------------------------------------------------------------------
# FerretDB (MongoDB wire protocol)

_OP_MSG = 2013


def _bson_encode(doc: dict[str, int | str]) -> bytes:
    body = bytearray()
    for key, value in doc.items():
        k = key.encode() + b"\0"
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"unsupported BSON value {value!r}")
        if isinstance(value, int):
            body += b"\x10" + k + struct.pack("<i", value)
        else:
            v = value.encode() + b"\0"
            body += b"\x02" + k + struct.pack("<i", len(v)) + v
    return struct.pack("<i", len(body) + 5) + bytes(body) + b"\0"


def _bson_top_level(doc: bytes) -> dict[str, Any]:
    """Decode the scalar top-level fields of a BSON document (enough to read a reply)."""
    out: dict[str, Any] = {}
    (size,) = struct.unpack_from("<i", doc, 0)
    i = 4
    fixed = {0x07: 12, 0x09: 8, 0x11: 8, 0x13: 16, 0x0A: 0, 0x7F: 0, 0xFF: 0}
    while i < size - 1:
        t = doc[i]
        end = doc.index(b"\0", i + 1)
        key = doc[i + 1:end].decode()
        i = end + 1
        if t == 0x01:
            out[key] = struct.unpack_from("<d", doc, i)[0]
            i += 8
        elif t == 0x02:
            (n,) = struct.unpack_from("<i", doc, i)
            out[key] = doc[i + 4:i + 4 + n - 1].decode("utf-8", "replace")
            i += 4 + n
        elif t in (0x03, 0x04):
            (n,) = struct.unpack_from("<i", doc, i)
            i += n
        elif t == 0x05:
            (n,) = struct.unpack_from("<i", doc, i)
            i += 5 + n
        elif t == 0x08:
            out[key] = doc[i] == 1
            i += 1
        elif t == 0x10:
            out[key] = struct.unpack_from("<i", doc, i)[0]
            i += 4
        elif t == 0x12:
            out[key] = struct.unpack_from("<q", doc, i)[0]
            i += 8
        elif t == 0x0B:
            i = doc.index(b"\0", doc.index(b"\0", i) + 1) + 1
        elif t in fixed:
            i += fixed[t]
        else:
            break  # a type we do not need; the fields read so far are enough
    return out


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-reply")
        buf += chunk
    return bytes(buf)


def mongo_command(port: int, command: dict[str, int | str], timeout: float = 2.0,
                  host: str = "127.0.0.1") -> dict[str, Any]:
    """Send one OP_MSG command (e.g. ``{"hello": 1, "$db": "admin"}``); return the reply's
    scalar top-level fields."""
    doc = _bson_encode(command)
    payload = struct.pack("<I", 0) + b"\x00" + doc
    header = struct.pack("<iiii", 16 + len(payload), 1, 0, _OP_MSG)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(header + payload)
        length, _req, _resp_to, opcode = struct.unpack("<iiii", _recv_exact(s, 16))
        body = _recv_exact(s, length - 16)
    if opcode != _OP_MSG:
        raise ValueError(f"unexpected reply opcode {opcode}")
    if body[4] != 0:
        raise ValueError(f"unexpected OP_MSG section kind {body[4]}")
    return _bson_top_level(body[5:])


def _probe_mongo(b: RunningBackend, timeout: float) -> bool:
    # listDatabases reads FerretDB's storage (PostgreSQL or SQLite), not just the listener.
    commands: list[dict[str, int | str]] = [
        {"hello": 1, "$db": "admin"},
        {"ping": 1, "$db": "admin"},
        {"listDatabases": 1, "nameOnly": 1, "$db": "admin"},
    ]
    for cmd in commands:
        reply = mongo_command(b.port, cmd, timeout)
        if reply.get("ok") != 1:
            raise ValueError(f"{next(iter(cmd))} -> {reply}")
    return True


def _ferretdb_argv(binary: Path, port: int, state_dir: Path, storage: list[str],
                   unix_socket: Path | None = None) -> list[str]:
    argv = [
        str(binary),
        *storage,
        f"--listen-addr=127.0.0.1:{port}",
        "--debug-addr=-",
        f"--state-dir={state_dir}",
        "--telemetry=disable",
        "--log-level=info",
    ]
    if unix_socket is not None:
        argv.append(f"--listen-unix={unix_socket}")
    return argv


# A unix socket path must fit in sun_path (108 bytes, NUL included).
_SUN_PATH_MAX = 100


def _mongo_unix_socket(data_dir: Path, port: int) -> Path | None:
    """Where FerretDB also listens on a unix socket (None when the path would not fit).
    PyMongo takes a host ending in ``.sock`` as a unix socket path."""
    path = data_dir / f"mongodb-{port}.sock"
    return path if len(str(path)) < _SUN_PATH_MAX else None


def mongo_unix_url(socket_path: Path) -> str:
    """The MongoDB URI of a unix socket (its path percent-encoded as the host)."""
    return "mongodb://" + urllib.parse.quote(str(socket_path), safe="") + "/"


def start_mongo(data_dir: Path, port: int | None = None, *, timeout: float = 60.0,
                handler: str | None = None) -> RunningBackend:
    """FerretDB v1 on ``handler`` (default :func:`mongo_handler`: PostgreSQL), telemetry off,
    no debug HTTP listener.

    * ``postgresql``: its own PostgreSQL server, data in ``data_dir/pg`` (initdb on first
      start), 127.0.0.1 on a free port plus a unix socket in ``data_dir/pg``, log
      ``data_dir/postgresql.log``, durability traded for speed (``fsync=off``,
      ``synchronous_commit=off``: a test backend). It runs in FerretDB's process group, so
      ``stop()`` stops both; ``extra["postgresql_url"]`` is its URL. FerretDB reaches it
      over that unix socket.
    * ``sqlite``: one ``<db>.sqlite`` file per database under ``data_dir/sqlite``.

    FerretDB listens on 127.0.0.1 (``url``) and on the unix socket
    ``data_dir/mongodb-<port>.sock`` (``extra["unix_url"]``, absent when the path is too long
    for a socket): same server, cheaper round trips for clients on this machine.

    Restarting with the same ``data_dir`` and ``port=previous.port`` keeps the URL and data."""
    chosen = mongo_handler(handler)
    binary = ferretdb_binary()
    data_dir = Path(data_dir).resolve()
    state_dir = data_dir / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    if port is not None:
        _wait_port_bindable(port, 10.0, "mongo")
    port = port if port is not None else free_port()
    log_path = data_dir / "ferretdb.log"
    env = dict(os.environ, DO_NOT_TRACK="1")
    offsets = {log_path: _file_size(log_path)}
    url = f"mongodb://127.0.0.1:{port}/"
    unix_socket = _mongo_unix_socket(data_dir, port)
    unix_extra: dict[str, str] = {}
    if unix_socket is not None:
        unix_socket.unlink(missing_ok=True)  # left by a killed FerretDB on this port
        unix_extra["unix_url"] = mongo_unix_url(unix_socket)
    if chosen == "sqlite":
        sqlite_dir = data_dir / "sqlite"
        sqlite_dir.mkdir(parents=True, exist_ok=True)
        argv = _ferretdb_argv(binary, port, state_dir,
                              ["--handler=sqlite", f"--sqlite-url=file:{sqlite_dir}/"], unix_socket)
        proc = _spawn(argv, cwd=data_dir, log_path=log_path, env=env)
        backend = RunningBackend(name="mongo", url=url, pid=proc.pid, data_dir=data_dir,
                                 log_path=log_path, port=port,
                                 extra={"handler": "sqlite", **unix_extra}, _proc=proc)
        _wait_ready(backend, timeout, offsets)
        return backend

    pg = _prepare_postgresql(data_dir)
    pg_port = free_port()
    while pg_port == port:
        pg_port = free_port()
    pg_url = f"postgres://{PG_USER}@127.0.0.1:{pg_port}/{PG_DATABASE}"
    # FerretDB reaches PostgreSQL over its unix socket when it has one (cheaper than TCP
    # loopback on both sides); pg_url stays the TCP URL for other clients.
    pg_socket_dir = pg.socket_dir()
    ferretdb_pg_url = (
        f"postgres://{PG_USER}@/{PG_DATABASE}?host={urllib.parse.quote(pg_socket_dir, safe='/')}"
        f"&port={pg_port}&" if pg_socket_dir else f"{pg_url}?")
    pg_log = data_dir / "postgresql.log"
    offsets[pg_log] = _file_size(pg_log)
    spec = {
        "postgres": pg.postgres_argv(pg_port),
        "pg_isready": [str(pg.bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(pg_port),
                       "-U", PG_USER, "-d", PG_DATABASE],
        "psql": [str(pg.bin_dir / "psql"), pg_url, "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        "setup_sql": PG_GIN_TRIGGER_SQL,
        "pg_dir": str(pg.pg_dir),
        "pg_log": str(pg_log),
        "run_as": list(pg.run_as) if pg.run_as else None,
        "timeout": timeout,
        "ferretdb": _ferretdb_argv(
            binary, port, state_dir,
            ["--handler=postgresql",
             f"--postgresql-url={ferretdb_pg_url}pool_max_conns={FERRETDB_PG_POOL}"],
            unix_socket),
    }
    # One process group for both servers: a small supervisor (this file, "_mongo_pg") starts
    # PostgreSQL as its child, waits until it accepts connections, then execs FerretDB. The
    # group's leader is FerretDB, so every existing stop path (RunningBackend.stop, the
    # reaper, `backends.py stop`) stops PostgreSQL with it.
    argv = [sys.executable, str(Path(__file__).resolve()), "_mongo_pg", json.dumps(spec)]
    proc = _spawn(argv, cwd=data_dir, log_path=log_path, env=env)
    backend = RunningBackend(
        name="mongo", url=url, pid=proc.pid, data_dir=data_dir, log_path=log_path, port=port,
        extra_logs=(pg_log,),
        extra={"handler": "postgresql", "postgresql_url": pg_url, "postgresql_port": str(pg_port),
               **unix_extra},
        _proc=proc)
    _wait_ready(backend, timeout, offsets)
    return backend


# The services that keep data on MongoDB, each in a database of its own (search has none).
MONGO_SERVICES: tuple[str, ...] = (
    "storage", "quota", "authz", "indexer", "workspace", "maintenance")


@dataclass(frozen=True)
class ServiceDatabase:
    """One service's own database on the local FerretDB, and the credentials that reach it
    and nothing else."""

    service: str
    database: str
    user: str
    password: str
    uri: str  # mongodb://user:password@127.0.0.1:P/?authMechanism=PLAIN


def provision_service_databases(
    backend: RunningBackend, prefix: str, services: Iterable[str] = MONGO_SERVICES,
) -> dict[str, ServiceDatabase]:
    """Give each service a database ``<prefix>_<service>`` and a PostgreSQL role of its own
    (login with a fresh password) that owns that database and nothing else.

    FerretDB v1 keeps each MongoDB database as a PostgreSQL schema and passes a client's
    PLAIN credentials through to PostgreSQL: connected with them (:attr:`ServiceDatabase.uri`)
    a service works in its own database and PostgreSQL refuses it every other one. The
    database is created through FerretDB by the superuser (so FerretDB knows it) and then
    handed to the role: a role may not create schemas, so it can make no database either.
    Calling again with the same prefix sets new passwords and keeps the data."""
    if backend.extra.get("handler") != "postgresql":
        raise BackendError("per-service credentials need FerretDB's PostgreSQL handler")
    bin_path = postgresql_bin_dir()
    if bin_path is None:
        raise ProvisionError("PostgreSQL client (psql) not found")
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", prefix):
        raise ValueError(f"prefix {prefix!r}: lower-case letters, digits and _ only")
    out: dict[str, ServiceDatabase] = {}
    statements: list[str] = []
    for service in services:
        database = f"{prefix}_{service}"
        # Creating and dropping a collection leaves the database (schema and FerretDB's
        # metadata table) behind; an existing one is kept as it is.
        for command in ({"create": "_engram_provision", "$db": database},
                        {"drop": "_engram_provision", "$db": database}):
            reply = mongo_command(backend.port, command, timeout=10.0)
            if reply.get("ok") != 1 and reply.get("codeName") != "NamespaceExists":
                raise BackendError(f"{next(iter(command))} in {database}: {reply}")
        user = database
        password = os.urandom(18).hex()
        statements += [
            f"DO $$ BEGIN CREATE ROLE {user} LOGIN; EXCEPTION WHEN duplicate_object THEN "
            f"NULL; END $$;",
            f"ALTER ROLE {user} LOGIN NOCREATEDB NOCREATEROLE PASSWORD '{password}';",
            f"ALTER SCHEMA {database} OWNER TO {user};",
            f"ALTER TABLE {database}._ferretdb_database_metadata OWNER TO {user};",
        ]
        uri = (f"mongodb://{user}:{password}@127.0.0.1:{backend.port}/"
               "?authMechanism=PLAIN")
        out[service] = ServiceDatabase(service, database, user, password, uri)
    proc = subprocess.run(
        [str(bin_path / "psql"), backend.extra["postgresql_url"], "-q", "-v", "ON_ERROR_STOP=1",
         "-f", "-"], input="\n".join(statements).encode(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, check=False, timeout=60)
    if proc.returncode != 0:
        raise BackendError("creating the service roles failed:\n"
                           + proc.stdout.decode("utf-8", "replace"))
    return out


@dataclass(frozen=True)
class _PgLayout:
    bin_dir: Path
    pg_dir: Path
    run_as: tuple[int, int] | None  # (uid, gid) when we are root

    def socket_dir(self) -> str:
        """Where PostgreSQL's unix socket goes ("" when its path would not fit in sun_path:
        a deep data dir gets TCP only)."""
        fits = len(str(self.pg_dir)) + len("/.s.PGSQL.65535") < _SUN_PATH_MAX
        return str(self.pg_dir) if fits else ""

    def postgres_argv(self, port: int) -> list[str]:
        socket_dir = self.socket_dir()
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": socket_dir,
            # A test/bench backend: durability traded for speed. An OS crash can lose or
            # corrupt this cluster; a killed server cannot (the WAL is still written).
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": str(PG_MAX_CONNECTIONS),
            "plan_cache_mode": "force_custom_plan",
            "logging_collector": "off",
            "log_min_messages": "warning",
        }
        argv = [str(self.bin_dir / "postgres"), "-D", str(self.pg_dir), "-p", str(port)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv


def _run_as_user() -> tuple[int, int] | None:
    """(uid, gid) of PG_RUN_AS when we are root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(PG_RUN_AS)
    except KeyError as e:
        raise BackendStartError(f"running as root, PostgreSQL needs an unprivileged user; "
                                f"{PG_RUN_AS!r} does not exist") from e
    return entry.pw_uid, entry.pw_gid


def _let_user_reach(path: Path, uid: int) -> None:
    """Give others search (x, not read) permission on each ancestor of ``path`` that ``uid``
    could not traverse (e.g. a 0700 mkdtemp dir), so PostgreSQL running as ``uid`` reaches
    its data dir."""
    for parent in reversed(path.parents):
        st = parent.stat()
        if st.st_uid == uid or st.st_mode & stat.S_IXOTH:
            continue
        os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
        _say(f"chmod o+x {parent} (PostgreSQL runs as {PG_RUN_AS} and must reach its data dir)")


def _prepare_postgresql(data_dir: Path) -> _PgLayout:
    """Find the PostgreSQL binaries and make sure ``data_dir/pg`` holds an initialised cluster."""
    bin_path = postgresql_bin_dir()
    if bin_path is None:
        raise ProvisionError(f"PostgreSQL server not installed (no {POSTGRESQL_LIB}/<v>/bin/"
                             f"initdb): run `make backends-install` (as root it runs: "
                             f"{POSTGRESQL_APT})")
    run_as = _run_as_user()
    data_dir.mkdir(parents=True, exist_ok=True)
    pg_dir = data_dir / "pg"
    if run_as is not None:
        _let_user_reach(pg_dir, run_as[0])
    if not (pg_dir / "PG_VERSION").is_file():
        _rmtree(pg_dir)  # a half-done initdb: start over
        pg_dir.mkdir(mode=0o700, parents=True)
        if run_as is not None:
            os.chown(pg_dir, *run_as)
        argv = [str(bin_path / "initdb"), "-D", str(pg_dir), "-U", PG_USER, "--auth=trust",
                "--encoding=UTF8", "--locale=C", "--no-sync"]
        proc = subprocess.run(argv, cwd=pg_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=False, timeout=120,
                              **_as_user_kwargs(run_as))
        if proc.returncode != 0:
            out = proc.stdout.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:]
            raise BackendStartError(f"initdb failed (exit {proc.returncode}): {' '.join(argv)}\n"
                                    + "\n".join(out))
    hba = pg_dir / "pg_hba.conf"
    if hba.read_text() != PG_HBA:  # a cluster made before service roles existed: trust-all
        hba.write_text(PG_HBA)
        if run_as is not None:
            os.chown(hba, *run_as)
    if run_as is not None and pg_dir.stat().st_uid != run_as[0]:
        # A cluster copied or restored as root (a cached pre-loaded state, a backup): give it
        # back to the user PostgreSQL runs as, or it cannot read its own files.
        for path in [pg_dir, *pg_dir.rglob("*")]:
            os.lchown(path, *run_as)
        _say(f"chown -R {PG_RUN_AS} {pg_dir} (the cluster was not owned by the user it runs as)")
    return _PgLayout(bin_dir=bin_path, pg_dir=pg_dir, run_as=run_as)


def _as_user_kwargs(run_as: tuple[int, int] | None) -> dict[str, Any]:
    if run_as is None:
        return {}
    return {"user": run_as[0], "group": run_as[1], "extra_groups": []}


def _mongo_pg_supervisor(raw_spec: str) -> int:
    """``backends.py _mongo_pg SPEC``: start PostgreSQL (our child, same process group), wait
    until it accepts connections, then exec FerretDB in this process. Our stdout is
    ferretdb.log, so a failure here lands at the top of that log."""
    spec = json.loads(raw_spec)
    run_as = tuple(spec["run_as"]) if spec["run_as"] else None
    with open(spec["pg_log"], "ab") as log:
        postgres = subprocess.Popen(spec["postgres"], cwd=spec["pg_dir"], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, close_fds=True,
                                    **_as_user_kwargs(run_as))  # type: ignore[arg-type]
    deadline = time.monotonic() + float(spec["timeout"])
    while True:
        code = postgres.poll()
        if code is not None:
            print(f"[engram-backends] postgres exited (code {code}) before accepting connections; "
                  f"see {spec['pg_log']}", flush=True)
            return 3
        ready = subprocess.run(spec["pg_isready"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if ready.returncode == 0:
            break
        if time.monotonic() >= deadline:
            print("[engram-backends] postgres did not accept connections in time", flush=True)
            postgres.terminate()
            return 3
        time.sleep(0.1)
    setup = subprocess.run(spec["psql"], input=spec["setup_sql"].encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, check=False, timeout=60)
    if setup.returncode != 0:
        print("[engram-backends] installing the GIN index trigger failed:\n"
              + setup.stdout.decode("utf-8", "replace"), flush=True)
        postgres.terminate()
        return 3
    print(f"[engram-backends] postgres (pid {postgres.pid}) ready; exec ferretdb", flush=True)
    os.execv(spec["ferretdb"][0], spec["ferretdb"])


# --------------------------------------------------------------------------------------
# OpenSearch


def _java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    java = shutil.which("java")
    if not java:
        raise ProvisionError("java not found (OpenSearch 2.19 needs Java 17+)")
    return java


def _probe_opensearch(b: RunningBackend, timeout: float) -> bool:
    status, body = _http_get(b.url + "/_cluster/health", timeout)
    if status != 200:
        return False
    return json.loads(body).get("status") in ("yellow", "green")


def start_opensearch(data_dir: Path, port: int | None = None, *, timeout: float = 90.0,
                     heap: str = OPENSEARCH_HEAP) -> RunningBackend:
    """One OpenSearch 2.19.6 node (no security plugin), waits for cluster health yellow|green.

    Layout: ``data_dir/home`` (path.home, config/log4j2.properties), ``data_dir/data``,
    ``data_dir/logs/opensearch.log`` (log_path), ``data_dir/jvm.log`` (JVM stdout/stderr)."""
    layout = opensearch_dir()
    if not (layout / OPENSEARCH_JAR).is_file():
        raise ProvisionError(f"OpenSearch launcher not provisioned ({layout}); "
                             "run `make backends-install`")
    if (layout / ".build-key").read_text().strip() != opensearch_build_key():
        raise ProvisionError("deploy/local/opensearch changed since the cached build: "
                             "run `make backends-install`")
    java = _java_binary()
    data_dir = Path(data_dir).resolve()
    home = data_dir / "home"
    tmp = data_dir / "tmp"
    for d in (home / "config", tmp, data_dir / "logs"):
        d.mkdir(parents=True, exist_ok=True)
    if port is None:
        port, transport_port = _free_ports(2)
    else:
        transport_port = free_port()
        while transport_port == port:
            transport_port = free_port()
    argv = [
        java,
        f"-Xms{heap}", f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:-OmitStackTraceInFastThrow",
        "-Xss1m",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        "-Dfile.encoding=UTF-8",
        "-Djna.nosys=true",
        "-Dio.netty.noUnsafe=true",
        "-Dio.netty.noKeySetOptimization=true",
        "-Dio.netty.recycler.maxCapacityPerThread=0",
        "-Dlog4j.shutdownHookEnabled=false",
        "-Dlog4j2.disable.jmx=true",
        # What the 2.x distribution's jvm.options sets on JDK 9+ (date/number formats).
        "-Djava.locale.providers=SPI,COMPAT",
        f"-Djava.io.tmpdir={tmp}",
        f"-Dopensearch.path.home={home}",
        f"-Dopensearch.path.conf={home / 'config'}",
        "-cp", f"{layout / OPENSEARCH_JAR}:{layout / 'lib'}/*",
        OPENSEARCH_MAIN,
        "--data-dir", str(data_dir),
        "--http-port", str(port),
        "--transport-port", str(transport_port),
    ]
    log_path = data_dir / "logs" / "opensearch.log"
    jvm_log = data_dir / "jvm.log"
    offsets = {log_path: _file_size(log_path), jvm_log: _file_size(jvm_log)}
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")}
    proc = _spawn(argv, cwd=data_dir, log_path=jvm_log, env=env)
    backend = RunningBackend(
        name="opensearch", url=f"http://127.0.0.1:{port}", pid=proc.pid, data_dir=data_dir,
        log_path=log_path, port=port, extra_logs=(jvm_log,),
        extra={"transport_port": str(transport_port)}, _proc=proc)
    _wait_ready(backend, timeout, offsets)
    return backend


_PROBES: dict[str, Callable[[RunningBackend, float], bool]] = {
    "nats": _probe_nats,
    "mongo": _probe_mongo,
    "opensearch": _probe_opensearch,
}

_STARTERS: dict[str, Callable[..., RunningBackend]] = {
    "nats": start_nats,
    "mongo": start_mongo,
    "opensearch": start_opensearch,
}


def start(name: str, data_dir: Path, port: int | None = None) -> RunningBackend:
    """Start one backend by name ("nats" | "mongo" | "opensearch")."""
    _check_names([name])
    return _STARTERS[name](data_dir, port)


# --------------------------------------------------------------------------------------
# CLI (detached backends recorded in DIR/<name>.pid and DIR/backends.env)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _is_ours(name: str, pid: int, data_dir: Path) -> bool:
    """Does ``pid`` still run our ``name`` backend on ``data_dir``? (guards against pid reuse)"""
    if not _pid_alive(pid):
        return False
    argv = _cmdline(pid)
    if not argv:
        return False
    joined = "\0".join(argv)
    marker = {"nats": "nats-server", "mongo": "ferretdb", "opensearch": OPENSEARCH_MAIN}[name]
    return marker in joined and str(data_dir.resolve()) in joined


def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def _write_env_file(path: Path, values: dict[str, str]) -> None:
    tmp = path.with_suffix(".env.tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    os.replace(tmp, path)


def _cli_start(root: Path, names: list[str], do_provision: bool) -> int:
    root.mkdir(parents=True, exist_ok=True)
    if do_provision:
        provision(names)
    env_file = root / "backends.env"
    previous = _read_env_file(env_file)
    values: dict[str, str] = {}
    started: list[RunningBackend] = []
    try:
        for name in names:
            pid_file = root / f"{name}.pid"
            data_dir = root / name
            if pid_file.exists():
                pid = int(pid_file.read_text().strip() or 0)
                if pid and _is_ours(name, pid, data_dir) and ENV_VARS[name] in previous:
                    _say(f"{name} already running (pid {pid})")
                    values[ENV_VARS[name]] = previous[ENV_VARS[name]]
                    continue
                pid_file.unlink()
            t0 = time.monotonic()
            b = _STARTERS[name](data_dir)
            started.append(b)
            pid_file.write_text(f"{b.pid}\n")
            values[ENV_VARS[name]] = b.url
            _say(f"{name} up in {time.monotonic() - t0:.1f}s: {b.url} (pid {b.pid}, log {b.log_path})")
    except BaseException:
        for b in started:
            with contextlib.suppress(BackendError):
                b.stop()
            (root / f"{b.name}.pid").unlink(missing_ok=True)
        raise
    merged = {k: v for k, v in previous.items() if k not in values}
    merged.update(values)
    _write_env_file(env_file, merged)
    for k, v in values.items():
        print(f"{k}={v}")
    return 0


def _cli_stop(root: Path) -> int:
    rc = 0
    env_file = root / "backends.env"
    remaining = _read_env_file(env_file)
    for name in BACKEND_NAMES:
        pid_file = root / f"{name}.pid"
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text().strip() or 0)
        if pid and _is_ours(name, pid, root / name):
            try:
                if os.getpgid(pid) == pid:
                    _stop_group(pid, None, 20.0)
                else:  # not a group leader (we never start it so): stop just that process
                    os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            except BackendError as e:
                print(f"error: {name}: {e}", file=sys.stderr)
                rc = 1
                continue
            _say(f"stopped {name} (pid {pid})")
        else:
            _say(f"{name}: pid {pid} no longer runs our backend; removing the stale pid file")
        pid_file.unlink(missing_ok=True)
        remaining.pop(ENV_VARS[name], None)
    if remaining:
        _write_env_file(env_file, remaining)
    else:
        env_file.unlink(missing_ok=True)
    return rc


def _cli_status(root: Path) -> int:
    env = _read_env_file(root / "backends.env")
    rc = 0
    any_found = False
    for name in BACKEND_NAMES:
        pid_file = root / f"{name}.pid"
        if not pid_file.exists():
            continue
        any_found = True
        pid = int(pid_file.read_text().strip() or 0)
        url = env.get(ENV_VARS[name], "?")
        if not _is_ours(name, pid, root / name):
            print(f"{name}: dead (stale pid {pid}) {url}")
            rc = 1
            continue
        port = int(url.rsplit(":", 1)[1].rstrip("/")) if ":" in url else 0
        b = RunningBackend(name=name, url=url.rstrip("/") if name == "opensearch" else url,
                           pid=pid, data_dir=root / name, log_path=root / name, port=port)
        ok = b.healthy()
        print(f"{name}: running pid {pid} {url} {'healthy' if ok else 'NOT ANSWERING'}")
        rc = rc if ok else 1
    if not any_found:
        print(f"no backends recorded in {root}")
        rc = 1
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_reap"] and len(argv) == 2:
        return _reap(int(argv[1]))
    if argv[:1] == ["_mongo_pg"] and len(argv) == 2:
        return _mongo_pg_supervisor(argv[1])
    parser = argparse.ArgumentParser(description="engram local backends (NATS, FerretDB, OpenSearch)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for cmd in ("start", "stop", "status", "provision"):
        p = sub.add_parser(cmd)
        if cmd != "provision":
            p.add_argument("--dir", default=".backends", type=Path,
                           help="state dir (pid files, backends.env, data); default ./.backends")
        if cmd in ("start", "provision"):
            p.add_argument("--only", default=",".join(BACKEND_NAMES),
                           help="comma-separated subset of nats,mongo,opensearch")
        if cmd == "start":
            p.add_argument("--no-provision", action="store_true",
                           help="do not run provision() first")
        if cmd == "provision":
            p.add_argument("--check-npm", action="store_true",
                           help="also require npm (make installs buf with it)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "provision":
            t0 = time.monotonic()
            provision(_check_names(args.only.split(",")), check_npm=args.check_npm)
            _say(f"backends ready in {cache_dir()} ({time.monotonic() - t0:.1f}s)")
            return 0
        root = args.dir.resolve()
        if args.cmd == "start":
            return _cli_start(root, _check_names(args.only.split(",")), not args.no_provision)
        if args.cmd == "stop":
            return _cli_stop(root)
        return _cli_status(root)
    except (BackendError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
