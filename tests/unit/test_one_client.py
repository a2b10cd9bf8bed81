"""One client for every caller (issue 30): no module outside engram.client and the generated
code builds an engram.v1 stub. A stub built by hand repeats metadata, deadlines, retries and
error mapping, and drifts; engram.client holds them once.

Two lists name the exceptions. RAW_WIRE: tests (and the client's own bench) that must speak
the wire itself, each with why. STILL_TO_MIGRATE: callers not yet moved onto engram.client;
the list may only shrink (a module on it that no longer builds a stub fails the test until
it is struck off).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("services", "bench", "tests")
OWNERS = ("services/engram/v1/", "services/engram/client/")
SERVICES = "Workspace|Storage|Search|Quota|Authz|Indexer|Maintenance"
ENGRAM_MODULES = (
    "authz|document|events|indexer|maintenance|position|quota|search|space|storage|workspace"
)
STUB = re.compile(rf"\b(?:(?:{ENGRAM_MODULES})_pb2_grpc\.\w+Stub|(?:{SERVICES})ServiceStub)\(")

RAW_WIRE = {
    "tests/fuzz/test_grpc_fuzz.py": "fuzzes every RPC with messages built from descriptors",
    "tests/e2e/test_hostile_imports.py": "streams hostile archives chunk by chunk as sent",
    "tests/load/test_repeated_refusals.py": (
        "sends oversized bodies and hostile archives as sent, and cuts an export mid-stream"
    ),
    "tests/e2e/test_polyglot_clients.py": (
        "the Python reference for the Go and TypeScript clients: watch and export on the wire"
    ),
    "tests/contract/test_server_limits.py": "sends oversized and malformed messages",
    "tests/contract/test_authz.py": (
        "sends what the client cannot: a Basic authorization header, an Authorize without action"
    ),
    "tests/e2e/test_error_model.py": "asserts the status codes and details on the wire",
    "tests/e2e/test_authz_matrix.py": "calls every served RPC, as the policy table lists them",
    "tests/e2e/test_search_grpc.py": "asserts SearchService's wire contract and details",
    "tests/unit/test_one_client.py": "names the pattern it looks for",
    "tests/e2e/test_tracing.py": "reads the x-request-id trailer a call carries on the wire",
    "tests/e2e/test_dev_server.py": "sends and reads the x-request-id metadata on the wire",
    "tests/contract/test_workspace.py": (
        "sends what the client cannot: an unset or undefined target, a path beside a fixed one"
    ),
    "bench/client_overhead.py": "the raw stub is the baseline the client is measured against",
    "tests/support/grpc_helpers.py": (
        "import_sync streams hostile archive pieces as sent, on the sync stub (grpc/grpc#36066)"
    ),
}

# Callers still on hand-built stubs, to move onto engram.client.
STILL_TO_MIGRATE: set[str] = set()


def stub_builders() -> set[str]:
    found = set()
    for top in SCANNED:
        for path in (ROOT / top).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(OWNERS):
                continue
            if STUB.search(path.read_text(encoding="utf-8")):
                found.add(relative)
    return found


def test_no_module_outside_the_client_builds_a_stub() -> None:
    stray = stub_builders() - RAW_WIRE.keys() - STILL_TO_MIGRATE
    assert not stray, (
        f"these build an engram.v1 stub by hand; call engram.client instead: {sorted(stray)}"
    )


def test_the_lists_name_only_modules_that_still_build_stubs() -> None:
    found = stub_builders()
    moved = (STILL_TO_MIGRATE | RAW_WIRE.keys()) - found
    assert not moved, f"no stub left in these: strike them off the lists: {sorted(moved)}"


def test_the_pattern_finds_what_it_means() -> None:
    assert STUB.search("stub = storage_pb2_grpc.StorageServiceStub(channel)")
    assert STUB.search("WorkspaceServiceStub(channel)")
    assert not STUB.search("health_pb2_grpc.HealthStub(channel)")
