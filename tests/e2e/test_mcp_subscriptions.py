"""Resource subscriptions over MCP: a client of a session-based revision subscribes to a
workspace document, a write made elsewhere (the gRPC client) arrives as
`notifications/resources/updated` for that URI only, unsubscribing stops them, and over a
hosted endpoint an agent never hears of another tenant's space. Refusals are clear JSON-RPC
errors; a watch that loses its token stops and resumes with the session's newer one. The
sessionless 2026-07-28 revision is not offered them (tests/e2e/test_mcp_hosted.py checks its
capability)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram.agent_mcp.subscriptions import MAX_SUBSCRIPTIONS
from engram.app.embedded import EmbeddedEngram
from engram.client import EngramClient, Space
from tests.conftest import EngramFactory
from tests.e2e.test_mcp import SPACE_ARGS, mcp_command
from tests.e2e.test_mcp_hosted import ANN, BOB, SPACE_PATH, hosted_mcp
from tests.support.tokens import mint

pytestmark = [
    pytest.mark.e2e,
    # resources/subscribe is deprecated in the SDK's client for the 2026-07-28 revision,
    # which these sessions do not speak.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

MEMORY = "engram://workspace/MEMORY.md"
# How long a notification may take: the feed follows the outbox relay.
WITHIN = 15.0
# Long enough for a wrongly delivered notification to show up.
QUIET = 1.5
# The SDK's own HTTP client timeouts: a GET stream may stay quiet for minutes (with httpx's
# 5 s default the client would drop it and reconnect, losing what is sent meanwhile).
SSE_TIMEOUT = httpx2.Timeout(30, read=300)


class Updates:
    """The `notifications/resources/updated` URIs a client received, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.queue.put_nowait(str(message.params.uri))

    async def next(self, within: float = WITHIN) -> str:
        async with asyncio.timeout(within):
            return await self.queue.get()

    async def none_within(self, seconds: float = QUIET) -> list[str]:
        await asyncio.sleep(seconds)
        heard = []
        while not self.queue.empty():
            heard.append(self.queue.get_nowait())
        return heard


async def write_until_heard(
    writer: EngramClient, path: str, updates: Updates, space: Space | None = None
) -> str:
    """Writes `path` and returns the first URI heard. Over HTTP the client opens its GET
    stream on its own after the handshake, and a notification sent before it is open is
    lost, so the write is repeated (at most three times)."""
    for attempt in range(3):
        await writer.write_document(path, f"change {attempt}\n", append=True, space=space)
        with contextlib.suppress(TimeoutError):
            return await updates.next(WITHIN / 3)
    raise AssertionError(f"no notifications/resources/updated after writing {path}")


def stdio_client(engram: EmbeddedEngram, updates: Updates) -> Client:
    command = mcp_command(engram)
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    # "legacy": the initialize handshake, whose session has a server->client channel.
    return Client(params, read_timeout_seconds=60, mode="legacy", message_handler=updates)


async def test_stdio_subscription_follows_the_change_feed(engram: EmbeddedEngram) -> None:
    space = Space("private", SPACE_ARGS[-1])
    updates = Updates()
    async with (
        EngramClient(f"127.0.0.1:{engram.port}", space=space, timeout=20) as direct,
        stdio_client(engram, updates) as client,
    ):
        assert client.protocol_version not in MODERN_PROTOCOL_VERSIONS
        resources = client.server_capabilities.resources
        assert resources is not None and resources.subscribe

        await direct.write_document("MEMORY.md", "# Memory\n")
        await client.subscribe_resource(MEMORY)
        # A change to another document first: the feed is ordered, so a notification for
        # it would arrive before MEMORY.md's.
        await direct.write_document("notes/other.md", "unsubscribed\n")
        await direct.write_document("MEMORY.md", "- Prefers tea.\n", append=True)
        assert await updates.next() == MEMORY
        assert await updates.none_within() == []

        # Unsubscribed, MEMORY.md is silent; another document subscribed is heard.
        await client.unsubscribe_resource(MEMORY)
        await direct.write_document("MEMORY.md", "- Prefers coffee now.\n", append=True)
        await client.subscribe_resource("engram://workspace/notes/b.md")
        await direct.write_document("MEMORY.md", "- And water.\n", append=True)
        await direct.write_document("notes/b.md", "b\n")
        assert await updates.next() == "engram://workspace/notes/b.md"
        assert await updates.none_within() == []

        # Clear refusals: another scheme, a path that is not canonical, too many URIs.
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource("file:///etc/passwd.md")
        assert refused.value.code == types.INVALID_PARAMS
        assert refused.value.message.startswith("INVALID_ARGUMENT: only workspace documents")
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource("engram://workspace/./MEMORY.md")
        assert refused.value.code == types.INVALID_PARAMS
        assert "[INVALID_PATH]" in refused.value.message
        for i in range(MAX_SUBSCRIPTIONS - 1):
            await client.subscribe_resource(f"engram://workspace/many/{i}.md")
        with pytest.raises(MCPError) as refused:
            await client.subscribe_resource("engram://workspace/one-too-many.md")
        assert refused.value.code == types.INVALID_REQUEST
        assert refused.value.message.startswith("RESOURCE_EXHAUSTED: a session holds at most")
        assert refused.value.message.endswith("[TOO_MANY_SUBSCRIPTIONS]")
        # The bound counts URIs held: one given back makes room again.
        await client.unsubscribe_resource("engram://workspace/many/0.md")
        await client.subscribe_resource("engram://workspace/one-too-many.md")
        await direct.write_document("one-too-many.md", "heard\n")
        assert await updates.next() == "engram://workspace/one-too-many.md"


@contextlib.asynccontextmanager
async def session_agent(url: str, token: str, updates: Updates) -> AsyncIterator[Client]:
    """An SDK client of a session-based revision (its `Mcp-Session-Id` and GET stream)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=SSE_TIMEOUT) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport, read_timeout_seconds=60, mode="legacy", message_handler=updates
        ) as client:
            yield client


async def test_hosted_agents_hear_only_their_own_space(tmp_path: Path) -> None:
    ann_heard, bob_heard = Updates(), Updates()
    async with hosted_mcp(tmp_path) as hosted:
        url = hosted.base + SPACE_PATH
        addr = f"127.0.0.1:{hosted.engram.port}"
        async with (
            EngramClient(addr, token=ANN, timeout=20) as ann_direct,
            EngramClient(addr, token=BOB, timeout=20) as bob_direct,
            session_agent(url, ANN, ann_heard) as ann,
            session_agent(url, BOB, bob_heard) as bob,
        ):
            for agent in (ann, bob):
                assert agent.protocol_version not in MODERN_PROTOCOL_VERSIONS
                resources = agent.server_capabilities.resources
                assert resources is not None and resources.subscribe
                # Both subscribe to the same URI, each in its own tenant's space.
                await agent.subscribe_resource(MEMORY)

            acme = Space("private", "notes", tenant="acme")
            globex = Space("private", "notes", tenant="globex")
            assert await write_until_heard(ann_direct, "MEMORY.md", ann_heard, acme) == MEMORY
            assert await write_until_heard(bob_direct, "MEMORY.md", bob_heard, globex) == MEMORY
            # Ann's writes came first (one to three): none reached Bob, and Bob's none Ann.
            assert await bob_heard.none_within() == []
            assert await ann_heard.none_within(0) == []

            await ann.unsubscribe_resource(MEMORY)
            await ann_direct.write_document("MEMORY.md", "- after\n", append=True, space=acme)
            await ann_direct.write_document("notes/x.md", "x\n", space=acme)
            assert await ann_heard.none_within() == []
            await bob_direct.write_document("MEMORY.md", "- still\n", append=True, space=globex)
            assert await bob_heard.next() == MEMORY


async def test_a_refused_watch_is_a_clear_error_and_the_session_goes_on(
    engram_factory: EngramFactory,
) -> None:
    """The feed serves one watcher here, held by another client: the subscribe is refused
    with the feed's own error, the session keeps working, and subscribes once it is free."""
    space = Space("private", SPACE_ARGS[-1])
    updates = Updates()
    async with engram_factory(feed_max_watchers=1) as engram:
        async with (
            EngramClient(f"127.0.0.1:{engram.port}", space=space, timeout=20) as direct,
            stdio_client(engram, updates) as client,
        ):
            holder = direct.watch_space()
            async with contextlib.aclosing(holder):
                first = await asyncio.wait_for(anext(holder), WITHIN)
                assert first.caught_up
                with pytest.raises(MCPError) as refused:
                    await client.subscribe_resource(MEMORY)
                assert refused.value.code == types.INVALID_REQUEST
                assert refused.value.message.startswith("RESOURCE_EXHAUSTED:")
                assert refused.value.message.endswith("[TOO_MANY_WATCHERS]")
                listed = await client.list_resources()
                assert listed.resources is not None
            # The other watch is gone once its stream is cancelled server-side.
            async with asyncio.timeout(WITHIN):
                while True:
                    try:
                        await client.subscribe_resource(MEMORY)
                        break
                    except MCPError as error:
                        assert "[TOO_MANY_WATCHERS]" in error.message
                        await asyncio.sleep(0.2)
            await direct.write_document("MEMORY.md", "- heard\n", append=True)
            assert await updates.next() == MEMORY


async def test_a_watch_its_token_lost_resumes_with_the_sessions_newer_token(
    tmp_path: Path,
) -> None:
    """The session (an operator's) subscribes with a personal access token that is then
    revoked: once the feed's connection is cut (every second here) the watch's resume is
    refused, and it stops while the session goes on. A request of the same session with a
    newer token resumes it from its last change: the write made meanwhile is heard."""
    heard = Updates()
    acme = Space("private", "notes", tenant="acme")
    age = {"grpc_max_connection_age_seconds": 1.0, "grpc_max_connection_age_grace_seconds": 0.5}
    async with hosted_mcp(tmp_path, **age) as hosted:
        addr = f"127.0.0.1:{hosted.engram.port}"
        admin = mint("root", "acme", "admin")
        async with (
            EngramClient(addr, token=admin, timeout=20) as operator,
            EngramClient(addr, token=ANN, timeout=20) as direct,
        ):
            created = await operator.create_token(role="member")
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {created.token}"}, timeout=SSE_TIMEOUT
            ) as http:
                transport = streamable_http_client(hosted.base + SPACE_PATH, http_client=http)
                async with Client(
                    transport, read_timeout_seconds=60, mode="legacy", message_handler=heard
                ) as ann:
                    await ann.subscribe_resource(MEMORY)
                    assert await write_until_heard(direct, "MEMORY.md", heard, acme) == MEMORY

                    assert await operator.revoke_token(created.token_id)
                    # Past a few cuts of the feed's connection, each resume refused.
                    await asyncio.sleep(4)
                    await direct.write_document(
                        "MEMORY.md", "- meanwhile\n", append=True, space=acme
                    )
                    assert await heard.none_within() == []

                    http.headers["Authorization"] = f"Bearer {admin}"
                    await ann.list_resources()
                    assert await heard.next() == MEMORY
