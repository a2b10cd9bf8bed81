"""The hosted app's lean `tools/call` path answers exactly as the MCP SDK does.

One hosted app (in process, in front of a real `engram dev --auth`) gets every request
twice: once with the lean path off (the SDK's session manager and dispatch answer) and once
with it on. Both answers must be the same - HTTP status, the headers a client reads, the
JSON-RPC body byte for byte - for every tool with valid arguments, each kind of invalid
argument, engram's own refusals, an unknown tool, malformed JSON-RPC, the HTTP checks
(Accept, Content-Type, Origin, the body cap, the session id, another credential), at the
2025-11-25 session revision and the sessionless 2026-07-28 one. And the lean path must be the
one that answered every valid engram tools/call, and none of the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from engram.agent_mcp.callers import HostedCallers
from engram.agent_mcp.hosted import EngramTokenVerifier, hosted_app
from engram.agent_mcp.lean import LeanToolCalls
from engram.agent_mcp.tools import build_server
from engram.app.embedded import embedded_engram
from engram.client import EngramClient
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint
from tests.unit.test_mcp_arguments import REFUSED

pytestmark = pytest.mark.e2e

ISSUER = "https://id.example.com"
BASE = "http://127.0.0.1:8765"
URL = "/mcp/private/lean"
ANN = mint("ann", "acme", "member")
BOB = mint("bob", "acme", "member")
MODERN = "2026-07-28"
SESSION = "2025-11-25"
# What a client reads of an answer besides its body.
HEADERS = ("content-type", "mcp-session-id", "allow", "www-authenticate")


@dataclass
class Hosted:
    http: httpx2.AsyncClient
    lean: LeanToolCalls


@contextlib.asynccontextmanager
async def hosted(tmp_path: Path, idle_timeout: float = 1800.0) -> AsyncIterator[Hosted]:
    settings = server_settings(
        tmp_path / "engram",
        jwt_secret=TEST_JWT_SECRET,
        workspace_writes_per_minute=0,
        workspace_writes_per_hour=0,
    )
    async with embedded_engram(settings, require_auth=True) as engram:
        addr = f"127.0.0.1:{engram.port}"
        async with EngramClient(addr) as client, EngramClient(addr) as authz:
            server = build_server(client, callers=HostedCallers(client))
            app = hosted_app(
                server,
                EngramTokenVerifier(authz, issuer=ISSUER),
                resource_url=BASE + "/mcp",
                issuer=ISSUER,
                host="127.0.0.1",
                session_idle_timeout=idle_timeout,
            )
            async with server.session_manager.run():
                transport = httpx2.ASGITransport(app=app)
                async with httpx2.AsyncClient(transport=transport, base_url=BASE) as http:
                    yield Hosted(http, app.state.lean)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    lean: bool  # answered by the lean path

    def json(self) -> Any:
        return json.loads(self.body)


async def post(
    hosted: Hosted, body: bytes | dict[str, Any], headers: dict[str, str], *, lean: bool
) -> Answer:
    hosted.lean.enabled = lean
    before = hosted.lean.answered
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await hosted.http.post(URL, content=content, headers=headers)
    kept = {name: response.headers[name] for name in HEADERS if name in response.headers}
    return Answer(response.status_code, kept, response.content, hosted.lean.answered > before)


async def both(
    hosted: Hosted,
    body: bytes | dict[str, Any],
    headers: dict[str, str],
    *,
    answered: bool | None,
    new_session: bool = False,
) -> Answer:
    """Sends the request through the SDK, then the lean path; the answers must be equal and
    the lean path must have answered it (`answered`) or handed it to the SDK."""
    sdk = await post(hosted, body, headers, lean=False)
    lean = await post(hosted, body, headers, lean=True)
    assert not sdk.lean
    if answered is not None:
        assert lean.lean is answered, (body, headers.get("Content-Type"), lean.status)
    if new_session:  # each answer opened a session of its own: a new id each
        assert sdk.headers.pop("mcp-session-id") != lean.headers.pop("mcp-session-id")
    assert (lean.status, lean.headers) == (sdk.status, sdk.headers), (body, headers)
    assert lean.body == sdk.body, (body, headers)
    return lean


class Revision:
    """How a client at one revision frames a tools/call."""

    def __init__(self, version: str, headers: dict[str, str]) -> None:
        self.version = version
        self.headers = headers

    def call(self, name: str, arguments: Any = None, request_id: Any = 7) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        if self.version == MODERN:
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    def headers_for(self, name: str) -> dict[str, str]:
        if self.version != MODERN:
            return self.headers
        return {**self.headers, "mcp-method": "tools/call", "mcp-name": name}


async def session_revision(hosted: Hosted) -> Revision:
    headers = {
        "Authorization": f"Bearer {ANN}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": SESSION,
            "capabilities": {},
            "clientInfo": {"name": "equivalence", "version": "1"},
        },
    }
    opened = await post(hosted, initialize, headers, lean=True)
    assert opened.status == 200 and not opened.lean
    headers = {
        **headers,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": SESSION,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(hosted, initialized, headers, lean=True)).status == 202
    return Revision(SESSION, headers)


def modern_revision() -> Revision:
    headers = {
        "Authorization": f"Bearer {ANN}",
        "Accept": "application/json",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
    }
    return Revision(MODERN, headers)


def result_of(answer: Answer) -> dict[str, Any]:
    result: dict[str, Any] = answer.json()["result"]
    return result


async def check_tools(hosted: Hosted, rev: Revision) -> None:
    """Every tool, valid and invalid arguments, engram's refusals, an unknown tool."""
    valid: list[tuple[str, Any]] = [
        ("memory_write", {"content": "Standup moved to 9:45."}),
        ("memory_write", {"content": "Ann prefers tea.", "target": "memory"}),
        ("memory_write", {"content": "# Apollo\nShips in May.", "target": "projects/apollo.md"}),
        (
            "memory_write",
            {"content": "Ünïcode ✓ notes", "target": "notes/u.md", "append": False},
        ),
        ("memory_read", {"path": "MEMORY.md"}),
        ("memory_read", {"date": "today"}),
        ("memory_read", {"path": "notes/u.md"}),
        ("memory_tree", None),
        ("memory_tree", {"path": "", "depth": 3}),
        ("memory_tree", {}),
    ]
    for name, arguments in valid:
        if name == "memory_write":
            # The first write to a document may create it (a daily log gets its heading):
            # both paths then make the same further write.
            await post(hosted, rev.call(name, arguments), rev.headers_for(name), lean=False)
        answer = await both(hosted, rev.call(name, arguments), rev.headers_for(name), answered=True)
        assert result_of(answer)["isError"] is False, answer
        assert "structuredContent" in result_of(answer)

    # Each kind of invalid argument: the tool's own refusal, `CODE: message [REASON]`.
    for name, arguments, message in REFUSED:
        answer = await both(hosted, rev.call(name, arguments), rev.headers_for(name), answered=True)
        result = result_of(answer)
        assert result["isError"] is True
        assert result["content"][0]["text"] == f"INVALID_ARGUMENT: {message} [INVALID_ARGUMENT]"
    unexpected = rev.call("memory_tree", {"depth": 2, "colour": "blue"})
    await both(hosted, unexpected, rev.headers_for("memory_tree"), answered=True)

    # engram's refusals of valid arguments.
    for name, arguments, starts in [
        ("memory_write", {"content": "I am evil.", "target": "SOUL.md"}, "PERMISSION_DENIED"),
        ("memory_write", {"content": ""}, "INVALID_ARGUMENT"),
        ("memory_write", {"content": "x", "target": "../up.md"}, "INVALID_ARGUMENT"),
        ("memory_write", {"content": "x", "target": "memory", "append": False}, ""),
        ("memory_read", {"path": "missing.md"}, "NOT_FOUND"),
        ("memory_read", {"date": "someday"}, "INVALID_ARGUMENT"),
        ("memory_tree", {"path": "nowhere"}, ""),
    ]:
        answer = await both(hosted, rev.call(name, arguments), rev.headers_for(name), answered=True)
        result = result_of(answer)
        if starts:
            assert result["isError"] is True
            assert result["content"][0]["text"].startswith(starts + ": "), result

    # Not an engram tool: the SDK's.
    await both(
        hosted, rev.call("no_such_tool", {}), rev.headers_for("no_such_tool"), answered=False
    )

    # memory_search once every write is searchable (both paths then wait for nothing).
    for _ in range(100):
        settled = await post(
            hosted,
            rev.call("memory_search", {"query": "tea"}),
            rev.headers_for("memory_search"),
            lean=False,
        )
        structured = result_of(settled)["structuredContent"]
        if structured["writes_pending"] == 0 and structured["waited_ms"] == 0:
            break
    for arguments in [
        {"query": "who prefers tea"},
        {"query": "Apollo ships", "limit": 2},
        {"query": "standup", "min_relevance": 0},
        {"query": "zebra crossing in Ulaanbaatar", "min_relevance": 0.99},
    ]:
        call = rev.call("memory_search", arguments)
        answer = await both(hosted, call, rev.headers_for("memory_search"), answered=True)
        assert result_of(answer)["isError"] is False

    # JSON the two revisions' parsers may take differently: whichever answers, alike.
    for raw in ('"\\ud800 lone surrogate"', "NaN", "1e400", '"x", "content": "twice"'):
        call = json.dumps(rev.call("memory_write", {"content": "@"})).replace('"@"', raw)
        await both(hosted, call.encode(), rev.headers_for("memory_write"), answered=None)

    # JSON-RPC ids of both kinds.
    for request_id in (0, "call-α", 2**40):
        call = rev.call("memory_tree", {}, request_id=request_id)
        await both(hosted, call, rev.headers_for("memory_tree"), answered=True)


async def check_malformed(hosted: Hosted, rev: Revision) -> None:
    """Malformed JSON-RPC and failed HTTP checks go to the SDK, whose answer stands."""
    headers = rev.headers_for("memory_tree")
    good = rev.call("memory_tree", {})
    malformed: list[bytes | dict[str, Any]] = [
        b"{not json",
        b"",
        b"[]",
        json.dumps([good]).encode(),
        {**good, "jsonrpc": "1.0"},
        {key: value for key, value in good.items() if key != "jsonrpc"},
        {**good, "id": True},
        {**good, "id": None},
        {**good, "id": 1.5},
        {**good, "extra": 1},
        {**good, "params": []},
        {**good, "params": {**good["params"], "arguments": ["depth", 2]}},
        {**good, "params": {**good["params"], "arguments": "{}"}},
        {**good, "params": {**good["params"], "name": 7}},
        {**good, "params": {**good["params"], "unknown": 1}},
    ]
    for body in malformed:
        await both(hosted, body, headers, answered=False)

    for changed in [
        {"Accept": "text/event-stream"},
        {"Accept": "text/html"},
        {"Content-Type": "text/plain"},
        {"Origin": "https://evil.example"},
        {"Host": "evil.example"},
        {"mcp-param-depth": "2"},
    ]:
        await both(hosted, good, {**headers, **changed}, answered=False)
    # The sessionless entry takes any Content-Type starting with application/json, the
    # session transport only application/json itself: whichever answers, alike.
    patch = {**headers, "Content-Type": "application/json-patch+json"}
    await both(hosted, good, patch, answered=None)
    # A body over the cap (4 MiB).
    oversized = rev.call("memory_write", {"content": "x" * (4 * 1024 * 1024)})
    answer = await both(hosted, oversized, rev.headers_for("memory_write"), answered=False)
    assert answer.status == 413


async def test_the_session_revision_answers_alike(tmp_path: Path) -> None:
    async with hosted(tmp_path) as running:
        rev = await session_revision(running)
        await check_tools(running, rev)
        await check_malformed(running, rev)
        headers = rev.headers_for("memory_tree")
        good = rev.call("memory_tree", {})
        for changed, answered in [
            ({"Mcp-Session-Id": "0" * 32}, False),  # unknown: 404
            ({"Authorization": f"Bearer {BOB}"}, False),  # another credential's session: 404
            ({"MCP-Protocol-Version": "2025-06-18"}, True),  # the session's version answers
        ]:
            await both(running, good, {**headers, **changed}, answered=answered)
        no_session = {k: v for k, v in headers.items() if k != "Mcp-Session-Id"}
        # Without a session id: the SDK opens a session for it, which refuses a tools/call
        # before initialize.
        await both(running, good, no_session, answered=False, new_session=True)
        # A session the client ended (DELETE): 404 from then on.
        ended = await running.http.delete(URL, headers=headers)
        assert ended.status_code == 200
        await both(running, good, headers, answered=False)


async def test_the_sessionless_revision_answers_alike(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with hosted(tmp_path) as running:
        rev = modern_revision()
        # The lean path leaves the same audit line per call, naming the caller.
        with caplog.at_level(logging.INFO, logger="engram.mcp.audit"):
            call = rev.call("memory_tree", {})
            assert (await post(running, call, rev.headers_for("memory_tree"), lean=True)).lean
        assert [r.getMessage() for r in caplog.records if r.name == "engram.mcp.audit"] == [
            "memory_tree by acme/ann in private/lean"
        ]
        await check_tools(running, rev)
        await check_malformed(running, rev)
        headers = rev.headers_for("memory_tree")
        good = rev.call("memory_tree", {})
        for changed in [
            {"mcp-name": "memory_read"},  # the header disagrees with the body
            {"mcp-method": "tools/list"},
            {"MCP-Protocol-Version": "2099-01-01"},
        ]:
            await both(running, good, {**headers, **changed}, answered=False)
        without_meta = {**good, "params": {"name": "memory_tree", "arguments": {}}}
        await both(running, without_meta, headers, answered=False)
        old_meta = rev.call("memory_tree", {})
        old_meta["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
        await both(running, old_meta, headers, answered=False)


async def test_calls_answered_by_the_lean_path_keep_a_session_open(tmp_path: Path) -> None:
    """As the SDK's transport does: no idle timeout while requests come, and the session
    ends once none has come for the idle timeout (then 404, from the SDK)."""
    idle = 1.0
    async with hosted(tmp_path, idle_timeout=idle) as running:
        rev = await session_revision(running)
        call, headers = rev.call("memory_tree", {}), rev.headers_for("memory_tree")
        started = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - started < 3 * idle:
            answer = await post(running, call, headers, lean=True)
            assert (answer.status, answer.lean) == (200, True)
            await asyncio.sleep(idle / 5)
        await asyncio.sleep(2 * idle)
        ended = await post(running, call, headers, lean=True)
        assert (ended.status, ended.lean) == (404, False)
