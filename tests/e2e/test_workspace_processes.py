"""`engram serve workspace` as deployed: two WorkspaceService processes on one MongoDB
(FerretDB), each calling StorageService and SearchService over gRPC with a service token.
The write limit is the agent's, whichever replica answers; remote errors keep their code."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from engram.app.embedded import embedded_engram
from engram.app.production import workspace_on_mongo
from engram.client import (
    AsyncClient,
    DocumentNotFound,
    PermissionDenied,
    RateLimited,
    SecretInContent,
    Space,
    WriteResult,
)
from engram.domain.errors import MissingSetting
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

ANN_TOKEN = mint("ann", "acme", "member")
BOB_TOKEN = mint("bob", "acme", "member")
AGENT = Space(name="agent")


async def fresh_minute() -> None:
    """Starts a burst early in a minute window, so it cannot straddle two."""
    into = time.time() % 60
    if into > 45:
        await asyncio.sleep(60 - into + 0.2)


@pytest.fixture
async def replicas(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[list[AsyncClient]]:
    """engram.client on each of two workspace replicas, as ann in the space "agent"."""
    async with embedded_engram(
        server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET), require_auth=True
    ) as engram:
        backend = f"127.0.0.1:{engram.port}"
        settings = server_settings(
            tmp_path / "workspace",
            jwt_secret=TEST_JWT_SECRET,
            mongo_uri=real_backends.url("mongo"),
            mongo_db=f"engram_ws_{uuid.uuid4().hex[:12]}",
            storage_addr=backend,
            search_addr=backend,
            service_token=service_token("workspace"),
        )
        async with workspace_on_mongo(settings) as one, workspace_on_mongo(settings) as two:
            clients = [
                AsyncClient(f"127.0.0.1:{s.port}", token=ANN_TOKEN, space=AGENT) for s in (one, two)
            ]
            try:
                yield clients
            finally:
                for client in clients:
                    await client.close()


async def outcome(write: Awaitable[WriteResult]) -> WriteResult | RateLimited:
    try:
        return await write
    except RateLimited as refused:
        return refused


async def test_two_replicas_share_the_agents_write_limit(replicas: list[AsyncClient]) -> None:
    await fresh_minute()

    def write(n: int, who: str = ANN_TOKEN) -> Awaitable[WriteResult]:
        return replicas[n % 2].as_caller(who, space=AGENT).memory_write(f"entry {n}")

    results = await asyncio.gather(*(outcome(write(n)) for n in range(21)))
    accepted = [r for r in results if isinstance(r, WriteResult)]
    refused = [r for r in results if isinstance(r, RateLimited)]
    assert len(accepted) == 20 and len(refused) == 1, results
    assert refused[0].retry_after_seconds is not None and refused[0].retry_after_seconds >= 1
    # Another agent (another principal in the same space) is not affected, on either replica.
    for n in range(2):
        await write(n, BOB_TOKEN)
    log = await replicas[0].memory_read((await write(0, BOB_TOKEN)).path)
    assert log.content.count("] entry ") == 23


async def test_remote_errors_keep_their_code(replicas: list[AsyncClient]) -> None:
    client = replicas[0]
    with pytest.raises(DocumentNotFound) as missing:
        await client.memory_read("x.md")
    assert "x.md" in missing.value.message
    with pytest.raises(SecretInContent):
        await client.memory_write("key AKIAIOSFODNN7EXAMPLE", target="memory")
    # Authorized before anything else: a viewer's empty write is a denial, not a bad request.
    viewer = client.as_caller(mint("vic", "acme", "viewer"), space=AGENT)
    with pytest.raises(PermissionDenied) as denied:
        await viewer.memory_write("")
    assert denied.value.info_reason == "MEMBER_ROLE_REQUIRED"
    written = await client.memory_write("hello", target="memory")
    read = await replicas[1].memory_read(written.path)
    assert read.content == "hello\n"


async def test_missing_settings_are_named_at_start(tmp_path: Path) -> None:
    settings = server_settings(tmp_path, mongo_uri="mongodb://127.0.0.1:1")
    with pytest.raises(MissingSetting) as missing:
        async with workspace_on_mongo(settings):
            pass
    for name in ("ENGRAM_STORAGE_ADDR", "ENGRAM_SEARCH_ADDR", "ENGRAM_SERVICE_TOKEN"):
        assert name in str(missing.value)


async def test_every_tool_works_through_the_remote_services(replicas: list[AsyncClient]) -> None:
    one, two = replicas
    seeded = await one.seed_workspace()
    assert "SOUL.md" in seeded.created_paths
    again = await two.seed_workspace()
    assert not again.created_paths
    await one.memory_write("Deploy freeze on Fridays.", target="notes/deploys.md")
    tree = await two.memory_tree(depth=2)
    names = {node.name: [c.path for c in node.children] for node in tree}
    assert names["notes/"] == ["notes/deploys.md"] and "MEMORY.md" in names
    first = await one.system_prompt()
    assert first.bootstrapping and not first.soul_changed
    # The SOUL.md baseline is shared through MongoDB: the other replica sees no change.
    assert not (await two.system_prompt()).soul_changed
    archived = await two.complete_bootstrap()
    assert archived.startswith("BOOTSTRAP.done-")
    assert not (await one.system_prompt()).bootstrapping
    deadline = time.monotonic() + 60
    while True:
        found = await one.memory_search("deploy freeze")
        if any(hit.path == "notes/deploys.md" for hit in found.results):
            break
        assert time.monotonic() < deadline, "the written note was never found"
        await asyncio.sleep(0.2)
