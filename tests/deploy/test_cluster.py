"""The chart's configuration produces a working system: helm/engram rendered with loopback
values, every Deployment run as its own `engram serve` process with the command and
environment from the manifests (deploy/local/cluster.py), on the real backends of
deploy/local, each service calling the others over gRPC with the chart's service token.

The tests share one system and run in order: the last ones restart storage and stop
everything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp import Client
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from engram.client import (
    AsyncClient,
    PermissionDenied,
    QuotaExceeded,
    SearchResults,
    Space,
    Unauthenticated,
    Unavailable,
)
from tests.deploy.chart import Helm
from tests.support.backends import RealBackends
from tests.support.scripts import load_script
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

SERVICES = {"storage", "quota", "authz", "indexer", "search", "workspace", "maintenance"}
PROCESSES = SERVICES | {"mcp"}
ANN = mint("ann", "acme", "member")
ADMIN = mint("root", "acme", "admin")
NOTES = Space(name="cluster-notes")
T = TypeVar("T")


cluster_py = load_script("deploy/local/cluster.py")


def _own_databases(real_backends: RealBackends, database: str) -> dict[str, tuple[str, str]]:
    """Each service its own PostgreSQL role behind FerretDB, as `make cluster-local` does;
    none (one shared database) on a MongoDB given by URL or a FerretDB on SQLite, which have
    no users to make here."""
    if os.environ.get("ENGRAM_TEST_MONGO_URI"):
        return {}
    mongo = real_backends.running("mongo")
    if mongo.extra.get("handler") != "postgresql":
        return {}
    own: dict[str, tuple[str, str]] = cluster_py.own_databases(
        real_backends.launcher, mongo, database
    )
    return own


@pytest.fixture(scope="module")
def system(
    helm: Helm, real_backends: RealBackends, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    database = f"engram_cluster_{uuid.uuid4().hex[:10]}"
    own = _own_databases(real_backends, database)
    backends = cluster_py.Backends(
        nats=real_backends.url("nats"),
        mongo=real_backends.url("mongo"),
        opensearch=real_backends.url("opensearch"),
        mongo_services=own,
    )
    plan = cluster_py.local_plan(
        helm,
        backends,
        tmp_path_factory.mktemp("cluster"),
        secret=TEST_JWT_SECRET,
        database=database,
    )
    cluster = cluster_py.Cluster(plan)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop(grace=15)


@pytest.fixture
async def channels(system: Any) -> AsyncIterator[dict[str, grpc.aio.Channel]]:
    credentials = system.plan.tls.credentials()
    opened = {
        name: grpc.aio.secure_channel(spec.address, credentials)
        for name, spec in system.plan.specs.items()
        if spec.grpc
    }
    try:
        yield opened
    finally:
        for channel in opened.values():
            await channel.close()


def client(
    channel: grpc.aio.Channel, token: str = ANN, space: Space = NOTES, retries: int = 3
) -> AsyncClient:
    """engram.client on one service's mTLS channel (left open when the client closes)."""
    return AsyncClient(channel=channel, token=token, space=space, retries=retries)


async def eventually(probe: Callable[[], Awaitable[T | None]], within: float, what: str) -> T:
    """Polls `probe` until it returns a value (bounded by `within` seconds)."""
    deadline = time.monotonic() + within
    while True:
        found = await probe()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {within:.0f}s"
        await asyncio.sleep(0.3)


async def search_paths(channel: grpc.aio.Channel, query: str) -> set[str]:
    """Paths BM25 finds: a hybrid search's hits ranked by the keyword leg (the vector leg
    adds nearest neighbours of any text). Hybrid, not lexical: on a busy machine the keyword
    leg may miss its deadline, and hybrid then answers degraded (here: nothing found yet)
    where lexical alone would fail."""
    answer = await client(channel).with_options(timeout=10).search(query, limit=10)
    return {hit.path for hit in answer.results if hit.bm25_rank}


def test_every_deployment_runs_as_its_own_process_with_the_charts_settings(system: Any) -> None:
    specs = system.plan.specs
    assert set(specs) == PROCESSES
    assert specs["mcp"].argv[:4] == ["engram", "mcp", "--transport", "http"]
    assert set(specs["mcp"].changes) == {
        "--host",
        "--port",
        "ENGRAM_ADDR",
        "ENGRAM_TLS_CA_FILE",
        "ENGRAM_TLS_CLIENT_CERT_FILE",
        "ENGRAM_TLS_CLIENT_KEY_FILE",
    }
    assert specs["mcp"].env["ENGRAM_ADDR"] == specs["workspace"].address
    assert specs["mcp"].env["ENGRAM_TLS_CLIENT_CERT_FILE"].endswith("/tls/tls.crt")
    for name, spec in ((n, s) for n, s in specs.items() if n != "mcp"):
        assert spec.argv == ["engram", "serve", name]
        assert system.procs[name].poll() is None
        # Only loopback changed: ports, bind hosts, peers' DNS names, mounted directories.
        assert set(spec.changes) <= {
            "ENGRAM_GRPC_HOST",
            "ENGRAM_GRPC_PORT",
            "ENGRAM_METRICS_HOST",
            "ENGRAM_METRICS_PORT",
            "ENGRAM_DATA_DIR",
            "ENGRAM_STORAGE_ADDR",
            "ENGRAM_AUTHZ_ADDR",
            "ENGRAM_SEARCH_ADDR",
            "ENGRAM_QUOTA_ADDR",
            "ENGRAM_INDEXER_ADDR",
            *(f"ENGRAM_TLS_{f}_FILE" for f in ("CERT", "KEY", "CLIENT_CA", "CA")),
            *(f"ENGRAM_TLS_CLIENT_{f}_FILE" for f in ("CERT", "KEY")),
        }, spec.changes
        # TLS and mTLS as the chart sets them: the files of the mounted Secret.
        assert spec.env["ENGRAM_TLS_CERT_FILE"].endswith("/tls/tls.crt")
        assert spec.env["ENGRAM_TLS_CLIENT_CA_FILE"].endswith("/tls/ca.crt")
    # The chart's wiring reached the processes: remote quota, and service tokens where the
    # chart gives them (indexer, workspace, storage with remoteQuota, search), from its Secret.
    assert specs["storage"].env["ENGRAM_QUOTA_ADDR"] == specs["quota"].address
    assert specs["workspace"].env["ENGRAM_STORAGE_ADDR"] == specs["storage"].address
    assert specs["workspace"].env["ENGRAM_SEARCH_ADDR"] == specs["search"].address
    assert specs["indexer"].env["ENGRAM_STORAGE_ADDR"] == specs["storage"].address
    # Search asks the indexer for index progress and authz for tokens: no MongoDB.
    assert specs["search"].env["ENGRAM_INDEXER_ADDR"] == specs["indexer"].address
    assert "ENGRAM_MONGO_URI" not in specs["search"].env
    for name in ("storage", "indexer", "workspace", "search"):
        assert specs[name].env["ENGRAM_SERVICE_TOKEN"] == system.plan.token
    for name in ("storage", "indexer", "workspace", "search"):
        assert specs[name].env["ENGRAM_TLS_INTERNAL"] == "true"
        assert specs[name].env["ENGRAM_TLS_CLIENT_CERT_FILE"].endswith("/tls/tls.crt")


def test_each_service_is_refused_every_other_services_database(system: Any) -> None:
    """Issue 34: every process runs with the MongoDB credentials the rendered chart gives it
    (its own Secret key), which reach its own database and no other: PostgreSQL, behind
    FerretDB, refuses another service's collections (OperationFailure "permission denied").
    The processes serve with them (this module's other tests)."""
    specs = system.plan.specs
    own = {
        name: (spec.env["ENGRAM_MONGO_URI"], spec.env["ENGRAM_MONGO_DB"])
        for name, spec in specs.items()
        if "ENGRAM_MONGO_URI" in spec.env
    }
    assert set(own) == SERVICES - {"search"}
    if len(set(own.values())) == 1:
        pytest.skip("one shared MongoDB (ENGRAM_TEST_MONGO_URI, or FerretDB on SQLite)")
    owners = set(own)
    assert len({own[name] for name in owners}) == len(owners)  # one user and database each
    clients: dict[str, MongoClient[dict[str, Any]]] = {
        name: MongoClient(own[name][0], serverSelectionTimeoutMS=10_000) for name in owners
    }
    try:
        collections: dict[str, list[str]] = {}
        for name, client in clients.items():
            database = client[own[name][1]]
            # Its own database: write, read back, and the collections it made at start.
            database["isolation_probe"].insert_one({"_id": name})
            assert database["isolation_probe"].find_one({"_id": name}) == {"_id": name}
            database.drop_collection("isolation_probe")
            collections[name] = [c for c in database.list_collection_names() if c]
            assert collections[name], f"{name} made no collection in {own[name][1]}"
        for name, client in clients.items():
            for other in owners - {name}:
                theirs = client[own[other][1]]
                for collection in collections[other]:
                    with pytest.raises(OperationFailure, match="permission denied"):
                        theirs[collection].find_one({})
                with pytest.raises(OperationFailure, match="permission denied"):
                    theirs["isolation_probe"].insert_one({"_id": name})
        # The password is checked: the same user with another password gets nothing.
        uri, database_name = own["storage"]
        user, password = uri.split("//", 1)[1].split("@", 1)[0].split(":", 1)
        wrong = uri.replace(f"{user}:{password}@", f"{user}:not-{password}@")
        impostor: MongoClient[dict[str, Any]]
        with MongoClient(wrong, serverSelectionTimeoutMS=10_000) as impostor:
            with pytest.raises(OperationFailure, match="password authentication failed"):
                impostor[database_name][collections["storage"][0]].find_one({})
    finally:
        for client in clients.values():
            client.close()


async def test_every_port_speaks_tls_only_and_requires_a_client_certificate(system: Any) -> None:
    tls = system.plan.tls
    for name, spec in ((n, s) for n, s in system.plan.specs.items() if s.grpc):
        for credentials in (
            None,  # plaintext
            grpc.ssl_channel_credentials(tls.ca),  # TLS without a client certificate
        ):
            channel = (
                grpc.aio.secure_channel(spec.address, credentials)
                if credentials
                else grpc.aio.insecure_channel(spec.address)
            )
            async with channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=5
                    )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, name


def test_the_helm_test_script_checks_every_service_over_mtls(system: Any) -> None:
    certificates = system.plan.workdir / "certificates"
    script = Path(__file__).resolve().parents[2] / "helm" / "engram" / "files" / "health_check.py"
    tls = ["--ca", certificates / "ca.pem"]
    tls += ["--cert", certificates / "engram.crt", "--key", certificates / "engram.key"]
    addresses = [spec.address for spec in system.plan.specs.values() if spec.grpc]
    checked = subprocess.run(
        [sys.executable, script, "--timeout", "20", *tls, *addresses],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.count(": SERVING") == len(SERVICES)


async def test_written_documents_are_found_by_search(
    channels: dict[str, grpc.aio.Channel],
) -> None:
    storage = client(channels["storage"])
    for path, text in {
        "ops/runbook.md": "The zebracorn dashboard shows the build farm.",
        "ops/oncall.md": "The pager rotation starts on Mondays.",
    }.items():
        await storage.write_document(path, text)

    # Storage published through NATS; the indexer process read the documents back from
    # storage (service token) and indexed them in OpenSearch; search reads OpenSearch.
    async def found() -> set[str] | None:
        paths = await search_paths(channels["search"], "zebracorn dashboard")
        return paths or None

    assert await eventually(found, 90, "indexed through NATS") == {"ops/runbook.md"}


async def test_workspace_calls_storage_and_search_over_grpc(
    channels: dict[str, grpc.aio.Channel],
) -> None:
    agent = Space(name="cluster-agent")
    workspace = client(channels["workspace"], space=agent)
    written = await workspace.memory_write(
        "The customer prefers quokka-themed release names.", target="memory"
    )
    assert written.path == "MEMORY.md"
    # Written by the storage process, on the workspace's service principal.
    stored = await client(channels["storage"], space=agent).read_document("MEMORY.md")
    assert "quokka-themed" in stored.content

    async def hits() -> list[str] | None:
        answer = await workspace.memory_search("quokka release names")
        return [h.path for h in answer.results] or None

    assert await eventually(hits, 90, "memory_search") == ["MEMORY.md"]
    prompt = await workspace.system_prompt()
    assert "## Long-Term Memory" in prompt.text and "quokka-themed" in prompt.text


async def test_the_mcp_server_works_through_the_workspace(
    system: Any, channels: dict[str, grpc.aio.Channel]
) -> None:
    """`engram mcp --transport http` as the chart runs it: its own token, the space from
    the values, the workspace over mTLS."""
    url = f"http://{system.plan.specs['mcp'].address}/mcp"
    async with Client(url, read_timeout_seconds=60) as mcp:
        result = await mcp.call_tool(
            "memory_write", {"content": "The offsite moved to Lisbon.", "target": "memory"}
        )
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["path"] == "MEMORY.md"
    agents = Space(visibility="project", project="agents", name="memory")
    stored = await client(channels["storage"], space=agents).read_document("MEMORY.md")
    assert "moved to Lisbon" in stored.content
    assert stored.updated_by == "engram-services"  # the workspace's principal


async def test_a_quota_set_through_quota_is_enforced_by_storage(
    channels: dict[str, grpc.aio.Channel],
) -> None:
    admin = mint("boss", "tight", "admin", platform_admin=True)
    member = mint("meg", "tight", "member")
    quota = client(channels["quota"], token=admin)
    await quota.set_tenant_quota("tight", 1000)
    storage = client(channels["storage"], token=member, space=Space(name="notes"))
    await storage.write_document("small.md", "x" * 400)
    with pytest.raises(QuotaExceeded) as refused:
        await storage.write_document("big.md", "y" * 800)
    assert "quota" in refused.value.message.lower()
    # Storage charged the quota process: its counter holds the accepted write only.
    usage = await quota.quota_usage(tenant="tight")
    assert (usage.tenant_used_bytes, usage.tenant_quota_bytes) == (400, 1000)


async def test_tokens_created_through_authz_are_honoured_by_storage(
    channels: dict[str, grpc.aio.Channel],
) -> None:
    authz = client(channels["authz"], token=ADMIN)
    tokens = {
        role: (await authz.create_token(role=role, ttl_seconds=600, description="cluster")).token
        for role in ("member", "viewer")
    }
    shared = Space(visibility="project", project="ops", name="cluster-team")
    member = client(channels["storage"], token=tokens["member"], space=shared)
    viewer = client(channels["storage"], token=tokens["viewer"], space=shared)
    await member.write_document("plan.md", "ship it")
    assert (await viewer.read_document("plan.md")).content == "ship it"
    with pytest.raises(PermissionDenied):
        await viewer.write_document("plan.md", "no")
    with pytest.raises(Unauthenticated):
        await client(channels["storage"], "egm_not-a-token", shared).read_document("plan.md")


async def test_storage_killed_and_restarted_the_others_recover(
    system: Any, channels: dict[str, grpc.aio.Channel]
) -> None:
    storage = client(channels["storage"])
    # No retries: each read is one attempt, so the outage is seen.
    workspace = client(channels["workspace"], retries=0).with_options(timeout=10)
    acknowledged = await storage.write_document("before-kill.md", "Acknowledged before the crash.")
    system.kill("storage")
    with pytest.raises(Unavailable):
        await workspace.memory_read("before-kill.md")
    system.start("storage")  # the same command, environment and port
    await asyncio.to_thread(system.wait_serving, ["storage"], 60)

    read = await storage.read_document("before-kill.md")
    assert read.sha256 == acknowledged.document.sha256

    # The workspace and the indexer were not restarted: their channels reconnect.
    async def through_workspace() -> str | None:
        try:
            answer = await workspace.memory_read("before-kill.md")
        except Unavailable:
            return None
        return answer.content

    assert await eventually(through_workspace, 30, "workspace reaches storage") == (
        "Acknowledged before the crash."
    )
    await storage.write_document("after-restart.md", "Wombat migrations resume.")

    async def indexed() -> set[str] | None:
        return await search_paths(channels["search"], "wombat migrations") or None

    assert await eventually(indexed, 90, "the indexer reads the restarted storage") == {
        "after-restart.md"
    }
    assert sorted(system.alive()) == sorted(PROCESSES)


async def test_search_restarted_finds_the_indexers_vectors(
    system: Any, channels: dict[str, grpc.aio.Channel]
) -> None:
    """The vector index the chart configures here (ENGRAM_VECTOR_DIR, shared by indexer and
    search on one host) holds what the indexer process embedded; a search process sees it
    when it opens the directory, so search is restarted by SIGTERM, as a rollout would."""
    await client(channels["storage"]).write_document(
        "ops/keys.md", "Rotate the narwhal signing keys every quarter."
    )

    async def indexed() -> set[str] | None:
        return await search_paths(channels["search"], "narwhal signing keys") or None

    assert await eventually(indexed, 90, "indexed through NATS") == {"ops/keys.md"}
    assert system.stop(["search"], grace=20) == {"search": 0}
    system.start("search")
    await asyncio.to_thread(system.wait_serving, ["search"], 90)
    answer = await client(channels["search"]).search(
        "how often are the narwhal secrets changed", limit=3, mode="semantic"
    )
    assert not answer.degraded, answer.degraded_reasons
    assert answer.results[0].path == "ops/keys.md"
    assert answer.results[0].vector_rank == 1


async def test_a_running_search_finds_the_indexers_new_vectors(
    system: Any, channels: dict[str, grpc.aio.Channel]
) -> None:
    """Search and indexer are separate processes sharing ENGRAM_VECTOR_DIR: a document
    written after search started is found in semantic mode, undegraded, without a restart
    (the search process follows the indexer's writes; bench/load.py measures how fast)."""
    await client(channels["storage"]).write_document(
        "zoo/otters.md", "Sea otters hold hands while they sleep."
    )

    async def indexed() -> set[str] | None:
        found = await search_paths(channels["search"], "sea otters sleep")
        return found if "zoo/otters.md" in found else None

    await eventually(indexed, 90, "indexed through NATS")

    async def semantic() -> SearchResults | None:
        answer = await client(channels["search"]).search(
            "which marine mammals link paws when resting", limit=3, mode="semantic"
        )
        found = answer.results and answer.results[0].path == "zoo/otters.md"
        return answer if found else None

    answer = await eventually(semantic, 10, "the search process sees the new vectors")
    assert not answer.degraded, answer.degraded_reasons
    assert answer.results[0].vector_rank == 1


def test_sigterm_stops_every_process_cleanly(system: Any) -> None:
    grace = float(system.plan.specs["storage"].env["ENGRAM_SHUTDOWN_GRACE_SECONDS"])
    started = time.monotonic()
    codes = system.stop(grace=grace + 10)
    # The MCP server's uvicorn shuts down gracefully, then re-raises the SIGTERM it caught
    # (so it ends by the signal, as its parent asked); a SIGKILL after the grace is -9.
    wanted = {**dict.fromkeys(SERVICES, 0), "mcp": -signal.SIGTERM}
    assert codes == wanted, "\n".join(system.log_tail(n) for n, c in codes.items() if c)
    assert time.monotonic() - started < grace + 10
    assert system.alive() == []
