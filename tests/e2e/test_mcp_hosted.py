"""Hosted `engram mcp`: one streamable-HTTP process in front of `engram dev --auth` serves
two agents of two tenants, each with its own bearer token, as an OAuth 2.0 resource server
(MCP authorization spec, RFC 9728). Each agent sees only its own space; missing, expired,
unknown and other-tenant tokens are refused with the metadata's address; and a write is
found by the very next search, 200 times in a row."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.client import EngramClient, Space
from tests.e2e.test_mcp import call, free_port, text_of, wait_listening
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = pytest.mark.e2e

ISSUER = "https://id.example.com"
ANN = mint("ann", "acme", "member")
BOB = mint("bob", "globex", "member")
SPACE_PATH = "/mcp/private/notes"
PAIRS = 200


@dataclass(frozen=True)
class Hosted:
    engram: EmbeddedEngram
    base: str  # http://127.0.0.1:<port>


@contextlib.asynccontextmanager
async def hosted_mcp(tmp_path: Path, **overrides: Any) -> AsyncIterator[Hosted]:
    """`engram mcp --hosted` in front of `engram dev --auth` (`overrides`: its settings)."""
    settings = server_settings(
        tmp_path / "engram",
        jwt_secret=TEST_JWT_SECRET,
        # 200 writes of one agent in a row: the write limits have their own tests.
        workspace_writes_per_minute=0,
        workspace_writes_per_hour=0,
        **overrides,
    )
    async with embedded_engram(settings, require_auth=True) as engram:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "engram",
            "mcp",
            "--transport",
            "http",
            "--hosted",
            "--issuer",
            ISSUER,
            "--port",
            str(port),
            "--addr",
            f"127.0.0.1:{engram.port}",
        ]
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_listening(base + "/mcp")
            yield Hosted(engram, base)
        finally:
            process.terminate()
            try:
                async with asyncio.timeout(20):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


@contextlib.asynccontextmanager
async def agent(url: str, token: str) -> AsyncIterator[Client]:
    """An SDK client sending `token` on every request (the caller closes its HTTP client)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, read_timeout_seconds=60) as client:
            yield client


async def post_initialize(url: str, headers: dict[str, str]) -> httpx2.Response:
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    async with httpx2.AsyncClient() as http:
        return await http.post(
            url,
            json=body,
            headers={"Accept": "application/json, text/event-stream", **headers},
        )


@pytest.fixture
async def hosted(tmp_path: Path) -> AsyncIterator[Hosted]:
    async with hosted_mcp(tmp_path) as running:
        yield running


async def test_refusals_carry_the_protected_resource_metadata(hosted: Hosted) -> None:
    url = hosted.base + SPACE_PATH
    metadata_url = f"{hosted.base}/.well-known/oauth-protected-resource/mcp"
    expired = mint("ann", "acme", "member", ttl=-60)
    refusals = {
        "missing": ({}, 401),
        "expired": ({"Authorization": f"Bearer {expired}"}, 401),
        "unknown": ({"Authorization": "Bearer egm_nosuchtoken_abc"}, 401),
        "forged": ({"Authorization": f"Bearer {mint('ann', secret='x' * 64)}"}, 401),
        "other tenant": (
            {"Authorization": f"Bearer {BOB}", "X-Engram-Tenant": "acme"},
            403,
        ),
    }
    for case, (headers, status) in refusals.items():
        response = await post_initialize(url, headers)
        assert response.status_code == status, case
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer "), case
        assert f'resource_metadata="{metadata_url}"' in challenge, case

    async with httpx2.AsyncClient() as http:
        for where in (metadata_url, f"{hosted.base}/.well-known/oauth-protected-resource"):
            metadata = (await http.get(where)).json()
            assert metadata["resource"] == f"{hosted.base}/mcp"
            assert metadata["authorization_servers"] == [ISSUER]
            assert metadata["bearer_methods_supported"] == ["header"]

    malformed = await post_initialize(
        hosted.base + "/mcp/project/notes", {"Authorization": f"Bearer {ANN}"}
    )
    assert malformed.status_code == 404
    assert "/mcp/project/<project>/<name>" in malformed.json()["error_description"]
    pinned = await post_initialize(
        url, {"Authorization": f"Bearer {ANN}", "X-Engram-Tenant": "acme"}
    )
    assert pinned.status_code == 200


async def test_two_tenants_share_one_endpoint_and_see_only_their_own(hosted: Hosted) -> None:
    url = hosted.base + SPACE_PATH
    async with agent(url, ANN) as ann, agent(url, BOB) as bob:
        await call(
            ann, "memory_write", {"content": "Acme's vault code is 1234.", "target": "memory"}
        )
        await call(bob, "memory_write", {"content": "Globex ships on Friday.", "target": "memory"})
        ann_memory = await call(ann, "memory_read", {"path": "MEMORY.md"})
        bob_memory = await call(bob, "memory_read", {"path": "MEMORY.md"})
        assert "vault code" in ann_memory["content"] and "Globex" not in ann_memory["content"]
        assert "Globex" in bob_memory["content"] and "vault" not in bob_memory["content"]

        found = await call(bob, "memory_search", {"query": "Acme vault code", "limit": 20})
        assert all("vault" not in hit["content"] for hit in found["results"])
        found = await call(ann, "memory_search", {"query": "Acme vault code"})
        assert found["results"] and "vault code" in found["results"][0]["content"]

        # The documents are resources, and the assembled system prompt a prompt, of each
        # caller's own space.
        listed = {str(r.uri) for r in (await ann.list_resources()).resources}
        assert "engram://workspace/MEMORY.md" in listed
        read = await ann.read_resource("engram://workspace/MEMORY.md")
        assert "vault code" in read.contents[0].text  # type: ignore[union-attr]
        read = await bob.read_resource("engram://workspace/MEMORY.md")
        assert "vault" not in read.contents[0].text  # type: ignore[union-attr]
        prompts = {p.name for p in (await ann.list_prompts()).prompts}
        assert "system_prompt" in prompts
        prompt = await ann.get_prompt("system_prompt", {})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert "vault code" in text and "Globex" not in text
        group = await ann.get_prompt("system_prompt", {"group_context": "true"})
        assert "vault code" not in group.messages[0].content.text  # type: ignore[union-attr]

    # Storage recorded each agent as the writer, not the MCP process.
    for token, tenant, subject in ((ANN, "acme", "ann"), (BOB, "globex", "bob")):
        async with EngramClient(f"127.0.0.1:{hosted.engram.port}", token=token) as direct:
            document = await direct.read_document(
                "MEMORY.md", space=Space("private", "notes", tenant=tenant)
            )
        assert document.updated_by == subject


async def test_a_session_cannot_be_taken_over_by_another_token(hosted: Hosted) -> None:
    url = hosted.base + SPACE_PATH
    opened = await post_initialize(url, {"Authorization": f"Bearer {ANN}"})
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with httpx2.AsyncClient() as http:
        hijack = await http.post(
            url,
            json=listing,
            headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {BOB}",
                "Mcp-Session-Id": session,
                "Mcp-Protocol-Version": "2025-06-18",
            },
        )
    assert hijack.status_code == 404


async def test_write_then_search_finds_the_write_every_time(hosted: Hosted) -> None:
    """200 write/search pairs over two agents, each search sent right after its write."""

    async def pairs(token: str, first: int) -> list[int]:
        waited = []
        async with agent(hosted.base + SPACE_PATH, token) as client:
            for i in range(first, first + PAIRS // 2):
                fact = f"Fact {i}: the locker {i} combination is kestrel-{i * 7919}."
                path = f"facts/fact-{i}.md"
                await call(client, "memory_write", {"content": fact, "target": path})
                found = await call(client, "memory_search", {"query": fact, "limit": 5})
                assert path in [hit["path"] for hit in found["results"]], (i, found)
                assert found["writes_pending"] == 0
                waited.append(found["waited_ms"])
        return waited

    waits = await asyncio.gather(pairs(ANN, 0), pairs(BOB, PAIRS // 2))
    assert sum(len(w) for w in waits) == PAIRS


async def test_strict_arguments_over_http(hosted: Hosted) -> None:
    async with agent(hosted.base + SPACE_PATH, ANN) as ann:
        # The SDK's client speaks the sessionless 2026-07-28 revision with this server, and
        # is not promised resource subscriptions the server would never deliver.
        assert ann.protocol_version == "2026-07-28"
        resources = ann.server_capabilities.resources
        assert resources is not None and not resources.subscribe
        refused = await ann.call_tool("memory_search", {"query": "x", "limit": "3"})
        assert refused.is_error
        assert text_of(refused) == (
            "INVALID_ARGUMENT: limit must be an integer, not a string [INVALID_ARGUMENT]"
        )
        # Read-by-date: today's daily log without computing its path.
        logged = await call(ann, "memory_write", {"content": "Standup moved to 9:45."})
        today = await call(ann, "memory_read", {"date": "today"})
        assert today["path"] == logged["path"] and "9:45" in today["content"]
        bad = await ann.call_tool("memory_read", {"date": "someday"})
        assert bad.is_error and text_of(bad).startswith("INVALID_ARGUMENT: date"), text_of(bad)
