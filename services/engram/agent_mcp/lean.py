"""The lean path of the hosted HTTP app: `tools/call` of one of engram's tools, answered in
the request's own task.

Why it exists: hosted MCP may add at most 2 ms to a call (issue 31), and the SDK's per-call
dispatch alone (the session's memory streams and task hops, the JSON-RPC envelope models,
the request context and middleware, the response models) took 1.5-2.5 ms of it; answered
here, the process spends a quarter less CPU per call (bench/RESULTS.md). Everything else -
initialize, tools/list, resources, prompts, subscriptions, notifications, GET and DELETE,
the sessions' lifecycle, and every request this module cannot prove it answers as the SDK
would - goes to the SDK unchanged.

The lean path answers only what it can answer exactly as the SDK does (tests/e2e/
test_mcp_lean.py sends every request both ways and compares): a POST whose body is one
well-formed JSON-RPC `tools/call` request for an engram tool, which passes the SDK's own
checks first - the DNS-rebinding and Content-Type check, Accept, the body cap, and per
revision either the 2026-07-28 envelope and header ladder (`classify_inbound_request`) or a
live, initialized session of the same credential - and the SDK's validation of the call's
params. The arguments go through the tool's own argument model, the result through the
tool's own result conversion, and the answer is the same JSON-RPC response (a refusal the
same `CODE: message [REASON]` tool error). Anything else is handed to the SDK, with the
body it has read. One difference is known: at the session revisions a client's
`notifications/cancelled` does not reach a call answered here (it runs to its end, as every
call does at 2026-07-28 in JSON mode).

It reads a few of the SDK's private fields (the session manager's sessions and owners, a
transport's idle countdown and Content-Type check, the tools' registrations), pinned by the
mcp version in pyproject.toml and checked against the SDK's own answers by that test.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio
import pydantic_core
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.inbound import (
    MCP_PROTOCOL_VERSION_HEADER,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.types import CallToolResult, TextContent
from mcp_types import SERVER_INFO_META_KEY
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.agent_mcp import subscriptions
from engram.agent_mcp.tools import (
    EngramMCPServer,
    ToolBody,
    argument_error,
    audited,
)
from engram.client import explain
from engram.domain.errors import EngramError
from engram.runtime import tracing

log = logging.getLogger("engram.mcp.lean")

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_MCP_PARAM_PREFIX = b"mcp-param-"


@dataclass(frozen=True, slots=True)
class _Entry:
    tool: Tool  # the SDK's registration: its argument model and result conversion
    body: ToolBody


@dataclass(frozen=True, slots=True)
class _Call:
    request_id: int | str
    name: str
    arguments: dict[str, Any]
    version: str
    session_id: str  # "" at 2026-07-28
    transport: StreamableHTTPServerTransport | None
    connection: Connection | None


class _Fallback(Exception):
    """This request goes to the SDK."""


class LeanToolCalls:
    """ASGI app: answers an engram `tools/call` itself (see the module), and hands every other
    request to `sdk`, the session manager's endpoint."""

    def __init__(
        self, sdk: ASGIApp, server: EngramMCPServer, manager: StreamableHTTPSessionManager
    ) -> None:
        self._sdk = sdk
        self._server = server
        self._manager = manager
        self._security = TransportSecurityMiddleware(manager.security_settings)
        self._entries = {
            name: _Entry(tool, body)
            for name, body in server.bodies.items()
            # The SDK's own registration of the tool (MCPServer has no public accessor).
            if (tool := server._tool_manager.get_tool(name)) is not None
        }
        # The session-protocol connections by session id, recorded as each session's first
        # message (its initialize) passes the SDK, forgotten when the connection closes.
        self._connections: dict[str, Connection] = {}
        server.middleware.append(self._record_connection)
        # The server's identity stamp (fixed at construction), dumped once: the SDK deep-copies
        # it per response so that a caller may change it; here it is only serialized.
        self._stamp = server._lowlevel_server.server_info_stamp
        self.enabled = True
        self.answered = 0  # tools/call answered here (the tests check which path ran)

    async def _record_connection(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        connection = subscriptions.session_connection(ctx)
        session_id = connection.session_id
        if session_id and session_id not in self._connections:
            self._connections[session_id] = connection
            connection.exit_stack.callback(self._connections.pop, session_id, None)
        return await call_next(ctx)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.enabled or scope.get("method") != "POST" or tracing.enabled():
            # Traced, every call keeps the SDK's own span.
            await self._sdk(scope, receive, send)
            return
        request = Request(scope)
        read: list[Message] = []
        try:
            body = await self._checked_body(request, receive, read)
            call = self._call(request, body)
        except _Fallback:
            await self._sdk(scope, _replay(read, receive), send)
            return
        self.answered += 1
        if call.transport is None:
            await self._answer(call, scope, send)
        else:
            await self._in_session(call, scope, send)

    async def _checked_body(self, request: Request, receive: Receive, read: list[Message]) -> bytes:
        """The body of a POST that passes the SDK's HTTP checks, or _Fallback (`read`: the
        messages received, for the SDK to receive again)."""
        if await self._security.validate_request(request, is_post=True) is not None:
            raise _Fallback
        if not check_accept_headers(request)[0]:
            raise _Fallback
        length = request.headers.get("content-length")
        if length is None or not length.isdigit():
            raise _Fallback
        limit = self._manager.max_request_body_size
        if int(length) > limit:
            raise _Fallback
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                raise _Fallback
            size += len(message.get("body", b""))
            if size > limit:
                raise _Fallback
            if not message.get("more_body", False):
                break
        return b"".join(message.get("body", b"") for message in read)

    def _call(self, request: Request, body: bytes) -> _Call:
        """The engram tool call `body` is, checked as the SDK checks it, or _Fallback."""
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        modern = version in MODERN_PROTOCOL_VERSIONS
        try:
            # Each revision's entry parses with its own parser (they differ at the edges).
            decoded = json.loads(body) if modern else pydantic_core.from_json(body)
        except (ValueError, RecursionError):
            raise _Fallback from None
        if not isinstance(decoded, dict) or decoded.keys() - _ENVELOPE_KEYS:
            raise _Fallback
        request_id, params = decoded.get("id"), decoded.get("params")
        if (
            decoded.get("jsonrpc") != "2.0"
            or decoded.get("method") != "tools/call"
            or isinstance(request_id, bool)
            or not isinstance(request_id, int | str)
            or not isinstance(params, dict)
            or params.keys() - _PARAM_KEYS
        ):
            raise _Fallback
        name, arguments = params.get("name"), params.get("arguments")
        if name not in self._entries or not isinstance(arguments, dict | None):
            raise _Fallback
        raw = request.scope["headers"]
        if any(key.lower().startswith(_MCP_PARAM_PREFIX) for key, _ in raw):
            raise _Fallback
        transport = connection = None
        session_id = request.headers.get(MCP_SESSION_ID_HEADER, "")
        if modern:
            verdict = classify_inbound_request(decoded, headers=_routing_headers(raw))
            if not isinstance(verdict, InboundModernRoute):
                raise _Fallback
            version = verdict.protocol_version
        elif version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            transport, connection = self._session(request, session_id)
            version = connection.protocol_version
            # The session protocol's own checks, as its transport makes them.
            if "_meta" in params or not transport._check_content_type(request):
                raise _Fallback
        else:
            raise _Fallback
        try:
            _methods.validate_client_request("tools/call", version, params)
        except (ValidationError, KeyError):
            raise _Fallback from None
        return _Call(
            request_id, cast(str, name), arguments or {}, version, session_id, transport, connection
        )

    def _session(
        self, request: Request, session_id: str
    ) -> tuple[StreamableHTTPServerTransport, Connection]:
        """A live, initialized session of this request's credential, or _Fallback (the SDK
        then answers 400, 404 or the init gate's error)."""
        manager = self._manager
        transport = manager._server_instances.get(session_id) if session_id else None
        connection = self._connections.get(session_id)
        if transport is None or connection is None or transport.is_terminated:
            raise _Fallback
        user = request.scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        if requestor != manager._session_owners.get(session_id):
            raise _Fallback
        if not connection.initialize_accepted:
            raise _Fallback
        if transport.idle_scope is not None and transport.idle_scope.cancel_called:
            raise _Fallback
        return transport, connection

    async def _in_session(self, call: _Call, scope: Scope, send: Send) -> None:
        """Answers a session's call holding the session open as the SDK's transport does: no
        idle timeout while a request is in flight, the countdown restarting after the last."""
        transport = call.transport
        assert transport is not None
        idle, timeout = transport.idle_scope, transport._idle_timeout
        if idle is None or timeout is None:
            await self._answer(call, scope, send)
            return
        transport._requests_in_flight += 1
        idle.deadline = math.inf
        try:
            await self._answer(call, scope, send)
        finally:
            transport._requests_in_flight -= 1
            if not transport._requests_in_flight:
                idle.deadline = anyio.current_time() + timeout

    async def _answer(self, call: _Call, scope: Scope, send: Send) -> None:
        dumped = _shaped(await self._result(call, scope), call.version)
        response = {"jsonrpc": "2.0", "id": call.request_id, "result": dumped}
        headers = [(b"content-type", b"application/json")]
        if call.version in MODERN_PROTOCOL_VERSIONS:
            if dumped.get("resultType") is None:
                dumped["resultType"] = "complete"
            meta = dumped.get("_meta")
            stamp = self._stamp
            if meta is None:
                dumped["_meta"] = {SERVER_INFO_META_KEY: stamp}
            elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
                dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: stamp}
            # As the single-exchange entry writes it (json.dumps, compact).
            body = json.dumps(response, separators=(",", ":")).encode()
        else:
            # As the session transport writes it (pydantic's JSON).
            body = pydantic_core.to_json(response)
            headers.append((MCP_SESSION_ID_HEADER.encode(), call.session_id.encode()))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _result(self, call: _Call, scope: Scope) -> BaseModel | CallToolResult:
        """The tool's own result (its output model), or the call's CallToolResult, as
        MCPServer (Tool.run, _handle_call_tool) and EngramMCPServer.call_tool make it:
        arguments first, then the caller, then the body."""
        entry = self._entries[call.name]
        metadata = entry.tool.fn_metadata
        try:
            try:
                arguments = metadata.validate_arguments(call.arguments)
            except ValidationError as error:
                raise argument_error(error) from None
            bound = self._server.callers.bind(_RequestView(scope))
            if call.connection is not None:
                # The session's resource subscriptions follow its newest token.
                watch = call.connection.state.get(subscriptions.STATE_KEY)
                if isinstance(watch, subscriptions.SessionWatch):
                    watch.present(bound)
            audited(call.name, bound)
            key = (call.session_id, bound.caller, bound.space)
            output = await entry.body(bound, key, **arguments)
            if type(output) is metadata.output_model and _plain(metadata):
                return output  # shaped by _shaped, as convert_result would
            result = metadata.convert_result(output)
            assert isinstance(result, CallToolResult)  # the four tools ask no input
            return result
        except EngramError as error:
            text = explain(error)
        except ToolError as error:
            text = str(error)
        # Deliberately broad, and only here: the SDK path (MCPServer._handle_call_tool and
        # Tool.run) turns any other exception of a tool call into this same error result,
        # and the equivalence test holds the two paths to the same answer. Nothing is hidden:
        # the traceback is logged as the SDK logs it. (An ASGI handler: no gRPC context here.)
        except Exception:  # noqa: BLE001
            log.exception("Tool %r raised an unexpected exception", call.name)
            text = f"Error executing tool {call.name}"
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _routing_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The request's headers as the SDK's 2026-07-28 entry reads them (dict(request.headers):
    each name's first value), or _Fallback when a routing header is repeated."""
    lines = [(key.decode("latin-1"), value.decode("latin-1")) for key, value in raw]
    if find_duplicated_routing_header(lines) is not None:
        raise _Fallback
    headers: dict[str, str] = {}
    for key, value in lines:
        headers.setdefault(key, value)
    return headers


def _plain(metadata: FuncMetadata) -> bool:
    """Whether the tool's result is its output model as is (not wrapped in `result`)."""
    return metadata.output_schema is not None and not metadata.wrap_output


def _shaped(outcome: BaseModel | CallToolResult, version: str) -> dict[str, Any]:
    """The `result` of the JSON-RPC response, as the SDK shapes it for the wire
    (FuncMetadata.convert_result, then the runner's _dump_result and _serialize, which
    orders the keys by the revision's own CallToolResult)."""
    if isinstance(outcome, CallToolResult):
        dumped = outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
        return _methods.serialize_server_result("tools/call", version, dumped)
    # The tool's output model, a success: the same dict built directly, without the
    # CallToolResult and its two pydantic passes (validated, dumped, validated again by the
    # revision's surface model, dumped again) that only reproduce it.
    text = pydantic_core.to_json(outcome, fallback=str, indent=2).decode()
    shaped: dict[str, Any] = {"content": [{"text": text, "type": "text"}], "isError": False}
    if version in MODERN_PROTOCOL_VERSIONS:
        shaped["resultType"] = "complete"
    shaped["structuredContent"] = outcome.model_dump(mode="json", by_alias=True)
    return shaped


@dataclass(frozen=True, slots=True)
class _RequestView:
    """What Callers.bind reads of a request: its ASGI scope."""

    scope: Mapping[str, Any]


def _replay(read: list[Message], receive: Receive) -> Receive:
    """`receive` with the messages this module already received in front."""
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


__all__ = ["LeanToolCalls"]
