"""The Go and TypeScript clients (clients/go, clients/ts) against `engram dev --auth` over
mTLS with a personal access token: each runs the same steps as the Python reference here (an
etag write, a conflicting write, read, list, a search carrying its write's position, the change
feed from a cursor, export) and prints a summary that must equal the reference's.

The toolchain pieces come from `make backends-install` (the Go module cache and build cache
under ~/.cache/engram, clients/ts/node_modules): the Go program builds with GOPROXY=off and
nothing here downloads anything."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
    space_pb2,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from tests.conftest import REQUIRE_REAL_BACKENDS
from tests.e2e.test_dev_server import free_port
from tests.support.backends import load_launcher
from tests.support.certs import Pair, TestCa

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "clients" / "go"
TS_PACKAGE = ROOT / "clients" / "ts"
NODE = shutil.which("node") or "node"

# What every conformance program writes, in this order (clients/go/cmd/engram-conformance,
# clients/ts/conformance/main.ts).
MEMORY_PATH, MEMORY_TEXT = "MEMORY.md", "# Memory\nThe team meets on Thursdays.\n"
PLAN_PATH = "notes/plan.md"
PLAN_DRAFT = "# Plan\nA first draft.\n"
PLAN_FINAL = "# Plan\nLaunch the zeppelin on Friday.\n"
PLAN_STALE = "# Plan\nAn edit made on a stale copy.\n"
SEARCH_QUERY = "zeppelin"
# Agent writes (MemoryWrite) per principal per minute on the test's server, and how many writes
# each program makes to meet the limit.
AGENT_WRITES_PER_MINUTE, AGENT_WRITES = 2, 5


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def missing_toolchain(what: str) -> None:
    message = f"{what}: run `make backends-install`"
    if REQUIRE_REAL_BACKENDS:
        pytest.fail(message)
    pytest.skip(message)


def go_env() -> dict[str, str]:
    """The Makefile's GO_ENV, offline: the modules and compiled packages clients-install left."""
    cache = load_launcher().cache_dir()
    return {
        **os.environ,
        "GOMODCACHE": str(cache / "go" / "mod"),
        "GOCACHE": str(cache / "go" / "clients-build"),
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=readonly -modcacherw -buildvcs=false",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
    }


def run_tool(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def go_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/go's conformance program and quickstart example, built once (offline) from the
    tree as it is, into the returned directory."""
    go = load_launcher()._find_go()
    if go is None:
        missing_toolchain("Go is not installed")
    if not (load_launcher().cache_dir() / "go" / "clients-build").is_dir():
        missing_toolchain("the Go client's modules are not cached")
    out = tmp_path_factory.mktemp("go")
    packages = ["./cmd/engram-conformance", "./examples/quickstart"]
    run_tool([go, "build", "-o", f"{out}/", *packages], cwd=GO_MODULE, env=go_env())
    return out


@pytest.fixture(scope="module")
def ts_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/ts compiled once with its own tsc into the returned directory, which sees the
    package's node_modules and, as `@engram/client`, itself (as the built package does)."""
    tsc = TS_PACKAGE / "node_modules" / ".bin" / "tsc"
    if shutil.which("node") is None or not tsc.exists():
        missing_toolchain("Node or clients/ts/node_modules is missing")
    out = tmp_path_factory.mktemp("ts")
    run_tool([str(tsc), "-p", str(TS_PACKAGE), "--outDir", str(out)], cwd=TS_PACKAGE)
    package = {"name": "@engram/client", "type": "module", "exports": {".": "./src/index.js"}}
    (out / "package.json").write_text(json.dumps(package))
    (out / "node_modules").symlink_to(TS_PACKAGE / "node_modules")
    return out


@dataclass(frozen=True)
class DevServer:
    address: str
    token: str  # a member's personal access token
    ca: Path
    client: Pair  # a client certificate for the mTLS port


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """`engram dev --auth` as a user starts it, serving mTLS; a PAT minted with its admin
    token through CreateToken."""
    tmp = tmp_path_factory.mktemp("dev")
    ca = TestCa(tmp)
    server = ca.issue("server", server=True)
    client = ca.issue("agent", server=False)
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_TLS_CERT_FILE": str(server.cert),
        "ENGRAM_TLS_KEY_FILE": str(server.key),
        "ENGRAM_TLS_CLIENT_CA_FILE": str(ca.path),
        "ENGRAM_WORKSPACE_WRITES_PER_MINUTE": str(AGENT_WRITES_PER_MINUTE),
    }
    argv = [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port),
            "--data-dir", str(tmp / "state")]  # fmt: skip
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        assert "auth on" in lines[1], lines
        admin = lines[2].strip()
        address = f"127.0.0.1:{port}"
        with secure_channel(address, ca.path, client) as channel:
            created = authz_pb2_grpc.AuthzServiceStub(channel).CreateToken(
                authz_pb2.CreateTokenRequest(
                    role=authz_pb2.ROLE_MEMBER, ttl_seconds=600, description="conformance"
                ),
                metadata=(("authorization", f"Bearer {admin}"),),
                timeout=30,
            )
        yield DevServer(address, created.token, ca.path, client)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def secure_channel(address: str, ca: Path, client: Pair) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )
    return grpc.secure_channel(address, credentials)


def python_reference(server: DevServer, name: str) -> dict[str, Any]:
    """The conformance steps through the Python generated stubs."""
    space = space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name=name)
    metadata = (("authorization", f"Bearer {server.token}"),)
    with secure_channel(server.address, server.ca, server.client) as channel:
        storage = storage_pb2_grpc.StorageServiceStub(channel)
        search = search_pb2_grpc.SearchServiceStub(channel)

        def write(path: str, content: str, expected: str = "") -> Any:
            return storage.WriteDocument(
                storage_pb2.WriteDocumentRequest(
                    space=space, path=path, content=content,
                    mode=storage_pb2.WRITE_MODE_REPLACE, expected_sha256=expected,
                ),
                metadata=metadata, timeout=30,
            )  # fmt: skip

        answers = [write(MEMORY_PATH, MEMORY_TEXT), write(PLAN_PATH, PLAN_DRAFT)]
        answers.append(write(PLAN_PATH, PLAN_FINAL, answers[1].document.sha256))
        writes = [
            {"path": a.document.path, "sha256": a.document.sha256,
             "version": a.document.version, "created": a.created}
            for a in answers
        ]  # fmt: skip
        with pytest.raises(grpc.RpcError) as caught:
            write(PLAN_PATH, PLAN_STALE, answers[1].document.sha256)
        conflict = decode_conflict(caught.value)
        with pytest.raises(grpc.RpcError) as caught:
            write(f"./{PLAN_PATH}", PLAN_STALE)
        invalid = decode_invalid(caught.value)

        document = storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space, path=PLAN_PATH),
            metadata=metadata, timeout=30,
        ).document  # fmt: skip
        listing = storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=space, recursive=True),
            metadata=metadata, timeout=30,
        )  # fmt: skip
        assert not listing.next_page_token
        found = search.Search(
            search_pb2.SearchRequest(
                spaces=[space], query=SEARCH_QUERY, limit=5, mode=search_pb2.SEARCH_MODE_LEXICAL,
                min_positions=[answers[2].position], max_wait_ms=10_000,
            ),
            metadata=metadata, timeout=30,
        )  # fmt: skip

        def watch(request: storage_pb2.WatchSpaceRequest) -> list[storage_pb2.SpaceChange]:
            stream = storage.WatchSpace(request, metadata=metadata, timeout=30)
            changes = []
            try:
                for message in stream:
                    if message.HasField("change"):
                        changes.append(message.change)
                    if message.caught_up:
                        return changes
            finally:
                stream.cancel()
            raise AssertionError("the feed ended before it caught up")

        replayed = watch(storage_pb2.WatchSpaceRequest(space=space, from_start=True))
        rest = watch(storage_pb2.WatchSpaceRequest(space=space, cursor=replayed[0].cursor))
        archive = b"".join(
            chunk.data
            for chunk in storage.ExportSpace(
                storage_pb2.ExportSpaceRequest(space=space), metadata=metadata, timeout=30
            )
        )
        limited = {}
        workspace = workspace_pb2_grpc.WorkspaceServiceStub(channel)
        for _ in range(AGENT_WRITES):
            try:
                workspace.MemoryWrite(
                    workspace_pb2.MemoryWriteRequest(
                        space=space, target=workspace_pb2.MEMORY_TARGET_MEMORY, content="A note."
                    ),
                    metadata=metadata, timeout=30,
                )  # fmt: skip
            except grpc.RpcError as error:
                limited = decode_rate_limited(error)
                break
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        exported = sorted(member.name for member in tar.getmembers() if member.isfile())
    return {
        "writes": writes,
        "conflict": conflict,
        "invalid": invalid,
        "read": {"path": document.path, "content": document.content,
                 "sha256": document.sha256, "version": document.version},
        "list": [e.path for e in listing.entries if not e.is_dir],
        "search": {"paths": [r.path for r in found.results],
                   "keyword_positions_behind": found.keyword_positions_behind,
                   "degraded": found.degraded},
        "feed": [{"path": c.path, "version": c.version, "sha256": c.sha256,
                  "kind": storage_pb2.ChangeKind.Name(c.kind).removeprefix("CHANGE_KIND_").lower()}
                 for c in rest],
        "export": exported,
        "rate_limited": limited,
    }  # fmt: skip


def decode_conflict(error: grpc.RpcError) -> dict[str, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, error
    info = error_details_pb2.ErrorInfo()
    assert any(detail.Unpack(info) for detail in status.details), status
    return {
        "code": error.code().name,  # type: ignore[attr-defined]
        "reason": info.reason,
        "current_sha256": info.metadata["current_sha256"],
    }


def decode_invalid(error: grpc.RpcError) -> dict[str, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, error
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    for detail in status.details:
        detail.Unpack(info) or detail.Unpack(bad)
    return {
        "code": error.code().name,  # type: ignore[attr-defined]
        "reason": info.reason,
        "field": bad.field_violations[0].field,
    }


def decode_rate_limited(error: grpc.RpcError) -> dict[str, Any]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, error
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    for detail in status.details:
        detail.Unpack(info) or detail.Unpack(retry)
    return {
        "code": error.code().name,  # type: ignore[attr-defined]
        "reason": info.reason,
        "has_retry_delay": retry.retry_delay.ToTimedelta().total_seconds() > 0,
    }


@pytest.fixture(scope="module")
def reference(dev_server: DevServer) -> dict[str, Any]:
    summary = python_reference(dev_server, "conformance-python")
    # What a user of any client sees, spelled out once.
    assert summary["writes"] == [
        {"path": MEMORY_PATH, "sha256": sha(MEMORY_TEXT), "version": 1, "created": True},
        {"path": PLAN_PATH, "sha256": sha(PLAN_DRAFT), "version": 1, "created": True},
        {"path": PLAN_PATH, "sha256": sha(PLAN_FINAL), "version": 2, "created": False},
    ]
    assert summary["conflict"] == {
        "code": "ABORTED", "reason": "ETAG_MISMATCH", "current_sha256": sha(PLAN_FINAL),
    }  # fmt: skip
    assert summary["invalid"] == {
        "code": "INVALID_ARGUMENT",
        "reason": "INVALID_PATH",
        "field": "path",
    }
    assert summary["read"] == {
        "path": PLAN_PATH, "content": PLAN_FINAL, "sha256": sha(PLAN_FINAL), "version": 2,
    }  # fmt: skip
    assert summary["list"] == [MEMORY_PATH, PLAN_PATH]
    assert summary["search"] == {
        "paths": [PLAN_PATH], "keyword_positions_behind": 0, "degraded": False,
    }  # fmt: skip
    assert summary["feed"] == [
        {"path": PLAN_PATH, "kind": "written", "version": 1, "sha256": sha(PLAN_DRAFT)},
        {"path": PLAN_PATH, "kind": "written", "version": 2, "sha256": sha(PLAN_FINAL)},
    ]
    assert summary["export"] == [MEMORY_PATH, PLAN_PATH]
    assert summary["rate_limited"] == {
        "code": "RESOURCE_EXHAUSTED", "reason": "RATE_LIMITED", "has_retry_delay": True,
    }  # fmt: skip
    return summary


def client_args(server: DevServer) -> list[str]:
    return [
        "--addr", server.address, "--token", server.token, "--ca", str(server.ca),
        "--cert", str(server.client.cert), "--key", str(server.client.key),
    ]  # fmt: skip


def summary_of(argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{argv[0]} failed:\n{proc.stdout}\n{proc.stderr}"
    parsed: dict[str, Any] = json.loads(proc.stdout)
    return parsed


def test_go_client_matches_python(
    dev_server: DevServer, reference: dict[str, Any], go_programs: Path
) -> None:
    go = [str(go_programs / "engram-conformance"), *client_args(dev_server)]
    assert summary_of([*go, "-space", "conformance-go"]) == reference


def test_typescript_client_matches_python(
    dev_server: DevServer, reference: dict[str, Any], ts_programs: Path
) -> None:
    node = [NODE, str(ts_programs / "conformance" / "main.js"), *client_args(dev_server)]
    assert summary_of([*node, "--space", "conformance-ts"]) == reference


QUICKSTART_OUTPUT = "wrote MEMORY.md version 1\nrefused: ABORTED ETAG_MISMATCH\nfound MEMORY.md\n"


def quickstart_env(server: DevServer, space: str) -> dict[str, str]:
    """What a user of the CLI has set: the examples read the CLI's variables."""
    return {
        **os.environ,
        "ENGRAM_ADDR": server.address,
        "ENGRAM_TOKEN": server.token,
        "ENGRAM_TLS_CA_FILE": str(server.ca),
        "ENGRAM_TLS_CLIENT_CERT_FILE": str(server.client.cert),
        "ENGRAM_TLS_CLIENT_KEY_FILE": str(server.client.key),
        "ENGRAM_SPACE": space,
    }


def test_the_readme_quickstarts_run_as_written(
    dev_server: DevServer, go_programs: Path, ts_programs: Path
) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Go and TypeScript clients", 1)[1].split("\n### ", 1)[0]
    for language, source in (
        ("go", GO_MODULE / "examples" / "quickstart" / "main.go"),
        ("ts", TS_PACKAGE / "examples" / "quickstart.ts"),
    ):
        assert f"```{language}\n{source.read_text()}```" in section, f"README shows {source}"
    runs = {
        "go": [str(go_programs / "quickstart")],
        "ts": [NODE, str(ts_programs / "examples" / "quickstart.js")],
    }
    for language, argv in runs.items():
        env = quickstart_env(dev_server, f"quickstart-{language}")
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert (proc.returncode, proc.stdout) == (0, QUICKSTART_OUTPUT), (language, proc.stderr)
