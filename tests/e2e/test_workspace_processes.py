"""`engram serve workspace` as deployed: two WorkspaceService processes on one MongoDB
(FerretDB), each calling StorageService and SearchService over gRPC with a service token.
The write limit is the agent's, whichever replica answers; remote errors keep their code."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from engram.app.embedded import embedded_engram
from engram.app.production import workspace_on_mongo
from engram.domain.errors import MissingSetting
from engram.v1 import workspace_pb2, workspace_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.grpc_helpers import CallFailure, fails, space
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

ANN = bearer(mint("ann", "acme", "member"))
BOB = bearer(mint("bob", "acme", "member"))
AGENT = space("agent")


async def fresh_minute() -> None:
    """Starts a burst early in a minute window, so it cannot straddle two."""
    into = time.time() % 60
    if into > 45:
        await asyncio.sleep(60 - into + 0.2)


@pytest.fixture
async def replicas(
    tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[list[workspace_pb2_grpc.WorkspaceServiceStub]]:
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
            channels = [grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") for s in (one, two)]
            try:
                yield [workspace_pb2_grpc.WorkspaceServiceStub(c) for c in channels]
            finally:
                for channel in channels:
                    await channel.close()


async def outcome(call: Any) -> grpc.StatusCode | CallFailure:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return CallFailure(error)
    return grpc.StatusCode.OK


async def test_two_replicas_share_the_agents_write_limit(
    replicas: list[workspace_pb2_grpc.WorkspaceServiceStub],
) -> None:
    await fresh_minute()

    def write(n: int, who: Any = ANN) -> Any:
        return replicas[n % 2].MemoryWrite(
            workspace_pb2.MemoryWriteRequest(space=AGENT, content=f"entry {n}"), metadata=who
        )

    results = await asyncio.gather(*(outcome(write(n)) for n in range(21)))
    accepted = [r for r in results if r == grpc.StatusCode.OK]
    refused = [r for r in results if isinstance(r, CallFailure)]
    assert len(accepted) == 20 and len(refused) == 1, [getattr(r, "code", r) for r in results]
    failure = refused[0]
    assert (failure.code, failure.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")
    assert failure.detail(error_details_pb2.RetryInfo).retry_delay.seconds >= 1
    # Another agent (another principal in the same space) is not affected, on either replica.
    for n in range(2):
        await write(n, BOB)
    log = await replicas[0].MemoryRead(
        workspace_pb2.MemoryReadRequest(space=AGENT, path=(await write(0, BOB)).path),
        metadata=ANN,
    )
    assert log.content.count("] entry ") == 23


async def test_remote_errors_keep_their_code(
    replicas: list[workspace_pb2_grpc.WorkspaceServiceStub],
) -> None:
    stub = replicas[0]
    missing = await fails(
        stub.MemoryRead(workspace_pb2.MemoryReadRequest(space=AGENT, path="x.md"), metadata=ANN),
        grpc.StatusCode.NOT_FOUND,
        "DOCUMENT_NOT_FOUND",
    )
    assert "x.md" in missing.message
    await fails(
        stub.MemoryWrite(
            workspace_pb2.MemoryWriteRequest(
                space=AGENT, content="key AKIAIOSFODNN7EXAMPLE", target=1
            ),
            metadata=ANN,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "SECRET_IN_CONTENT",
    )
    # Authorized before anything else: a viewer's empty write is a denial, not a bad request.
    viewer = bearer(mint("vic", "acme", "viewer"))
    await fails(
        stub.MemoryWrite(
            workspace_pb2.MemoryWriteRequest(space=AGENT, content=""), metadata=viewer
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "MEMBER_ROLE_REQUIRED",
    )
    written = await stub.MemoryWrite(
        workspace_pb2.MemoryWriteRequest(space=AGENT, content="hello", target=1), metadata=ANN
    )
    read = await replicas[1].MemoryRead(
        workspace_pb2.MemoryReadRequest(space=AGENT, path=written.path), metadata=ANN
    )
    assert read.content == "hello\n"


async def test_missing_settings_are_named_at_start(tmp_path: Path) -> None:
    settings = server_settings(tmp_path, mongo_uri="mongodb://127.0.0.1:1")
    with pytest.raises(MissingSetting) as missing:
        async with workspace_on_mongo(settings):
            pass
    for name in ("ENGRAM_STORAGE_ADDR", "ENGRAM_SEARCH_ADDR", "ENGRAM_SERVICE_TOKEN"):
        assert name in str(missing.value)


async def test_every_tool_works_through_the_remote_services(
    replicas: list[workspace_pb2_grpc.WorkspaceServiceStub],
) -> None:
    one, two = replicas
    seeded = await one.SeedWorkspace(workspace_pb2.SeedWorkspaceRequest(space=AGENT), metadata=ANN)
    assert "SOUL.md" in seeded.created_paths
    again = await two.SeedWorkspace(workspace_pb2.SeedWorkspaceRequest(space=AGENT), metadata=ANN)
    assert not again.created_paths
    await one.MemoryWrite(
        workspace_pb2.MemoryWriteRequest(
            space=AGENT, target=4, path="notes/deploys.md", content="Deploy freeze on Fridays."
        ),
        metadata=ANN,
    )
    tree = await two.MemoryTree(workspace_pb2.MemoryTreeRequest(space=AGENT, depth=2), metadata=ANN)
    names = {node.name: [c.path for c in node.children] for node in tree.nodes}
    assert names["notes/"] == ["notes/deploys.md"] and "MEMORY.md" in names
    first = await one.GetSystemPrompt(
        workspace_pb2.GetSystemPromptRequest(space=AGENT), metadata=ANN
    )
    assert first.bootstrapping and not first.soul_changed
    # The SOUL.md baseline is shared through MongoDB: the other replica sees no change.
    assert not (
        await two.GetSystemPrompt(workspace_pb2.GetSystemPromptRequest(space=AGENT), metadata=ANN)
    ).soul_changed
    done = await two.CompleteBootstrap(
        workspace_pb2.CompleteBootstrapRequest(space=AGENT), metadata=ANN
    )
    assert done.archived_path.startswith("BOOTSTRAP.done-")
    assert not (
        await one.GetSystemPrompt(workspace_pb2.GetSystemPromptRequest(space=AGENT), metadata=ANN)
    ).bootstrapping
    deadline = time.monotonic() + 60
    while True:
        found = await one.MemorySearch(
            workspace_pb2.MemorySearchRequest(space=AGENT, query="deploy freeze"), metadata=ANN
        )
        if any(hit.path == "notes/deploys.md" for hit in found.hits):
            break
        assert time.monotonic() < deadline, "the written note was never found"
        await asyncio.sleep(0.2)
