"""The four memory tools as Model Context Protocol tools, answered by WorkspaceService.

Each tool calls the workspace through `EngramClient`, as the call's caller (engram.agent_mcp
.callers); its JSON output is one of the pydantic models below (the tool's output schema). A
failed call comes back to the model as an MCP tool error `CODE: message [REASON]`, e.g.
`PERMISSION_DENIED: ... [PROTECTED_FILE]`; arguments are strict (no coercion: `"3"` is not an
integer, `"false"` not a boolean) and a refused one names its field the same way.

Read your writes: each MCP session remembers where the indexes must be for its own writes to
be found, and memory_search waits (bounded) until they are, reporting the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from typing import Annotated, Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    ListResourcesResult,
    PaginatedRequestParams,
    SubscribeRequestParams,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

import engram
from engram.agent_mcp import resources, subscriptions
from engram.agent_mcp.callers import Bound, Callers, ProcessCaller
from engram.agent_mcp.resources import Lister
from engram.client import EngramClient, Space, TreeNode, explain
from engram.domain.errors import EngramError, InvalidArgument
from engram.domain.positions import IndexPosition
from engram.runtime.ttl_cache import TtlCache

# One line per tool call naming its caller and space (hosted: each agent's principal).
audit = logging.getLogger("engram.mcp.audit")

INSTRUCTIONS = """\
Engram is your persistent memory across conversations. Search it (memory_search) before
answering anything about prior work, decisions, dates, people, preferences or todos; write to
it (memory_write) whenever you learn something worth keeping. Durable facts, preferences and
decisions go to target "memory" (MEMORY.md); what happened today goes to the daily log (the
default target). IDENTITY.md, SOUL.md, AGENTS.md and USER.md are maintained by your operator
and cannot be written through these tools."""

SEARCH_DESCRIPTION = """\
Search your long-term memory (MEMORY.md, daily logs and every note) by meaning and keywords.
You MUST call this before answering questions about prior work, decisions, dates, people,
preferences or todos - do not answer those from assumption. Returns the best-matching
passages first, each with its path and its relevance (the probability, 0 to 1, that it is
relevant). When no passage is likely relevant the result is empty: nothing relevant is
stored, so say you do not remember rather than guessing."""

WRITE_DESCRIPTION = """\
Save something to memory. target "memory" (MEMORY.md) is for durable facts, preferences and
decisions; "daily_log" (the default) adds a timestamped entry to today's daily/YYYY-MM-DD.md
for what happened, was done or was said; "heartbeat" writes HEARTBEAT.md; any other value is
a relative .md path for a topic note (e.g. "projects/apollo.md"). Appends by default;
append=false replaces the whole document, so read it first (MEMORY.md only grows: it cannot
be replaced). Call it when the user states a
preference, makes a decision, asks you to remember something, or a piece of work is done.
IDENTITY.md, SOUL.md, AGENTS.md and USER.md are protected: writing them fails."""

READ_DESCRIPTION = """\
Read one memory document in full by its path (e.g. "MEMORY.md", "daily/2026-12-01.md", or a
path returned by memory_search or memory_tree), or a day's daily log by date ("today",
"yesterday" or YYYY-MM-DD, in your time zone) with no path. Use it when a search hit needs
its surrounding context, to recall what happened on a day, or to see a document before
replacing it."""

TREE_DESCRIPTION = """\
List the memory workspace as a tree: files, and directories ending with "/". Starts at path
(default: the workspace root) and goes depth levels down (1 = immediate children, up to 10).
Use it to discover which documents exist before reading them."""


class MemoryWriteResult(BaseModel):
    status: str = Field(description='"written".')
    path: str = Field(description="The document written.")
    append: bool = Field(description="True if the content was appended, false if it replaced.")
    content_length: int = Field(description="UTF-8 bytes written (with any entry prefix).")


class MemorySearchHit(BaseModel):
    content: str = Field(description="The matching passage.")
    score: float = Field(description="Rank score between 0 and 1 (1 = this query's best).")
    relevance: float = Field(
        description="Probability between 0 and 1 that the passage is relevant, comparable "
        "across queries."
    )
    document_id: str
    path: str = Field(description="The document the passage comes from.")
    is_hybrid_match: bool = Field(description="Found by both keyword and semantic search.")


class MemorySearchResult(BaseModel):
    query: str
    results: list[MemorySearchHit] = Field(description="Best match first.")
    result_count: int
    waited_ms: int = Field(
        0, description="How long the search waited for this session's own writes to be indexed."
    )
    writes_pending: int = Field(
        0, description="This session's writes not yet searchable when the wait ended (0: all)."
    )


class MemoryReadResult(BaseModel):
    path: str
    content: str
    word_count: int
    updated_at: str = Field(description="Last change, RFC 3339 (UTC).")


class MemoryTreeNode(BaseModel):
    name: str = Field(description='File name, or directory name ending with "/".')
    path: str = Field(description="Path from the workspace root.")
    children: list[MemoryTreeNode] = Field(default_factory=list)


class MemoryTreeResult(BaseModel):
    path: str = Field(description="The directory listed (empty: the workspace root).")
    depth: int
    tree: list[MemoryTreeNode]


def _tree(node: TreeNode) -> MemoryTreeNode:
    return MemoryTreeNode(
        name=node.name, path=node.path, children=[_tree(child) for child in node.children]
    )


@contextmanager
def _tool_errors() -> Iterator[None]:
    """An engram error becomes the tool error the model reads: `CODE: message [REASON]`."""
    try:
        yield
    except EngramError as error:
        raise ToolError(explain(error)) from None


# --- strict arguments --------------------------------------------------------------------------

_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "float_type": "a number",
}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _argument_message(detail: ErrorDetails) -> tuple[str, str]:
    name = ".".join(str(part) for part in detail["loc"]) or "arguments"
    kind, context = detail["type"], detail.get("ctx") or {}
    if kind == "missing":
        return name, f"{name} is required"
    if kind in _EXPECTED:
        got = _json_kind(detail.get("input"))
        return name, f"{name} must be {_EXPECTED[kind]}, not {got}"
    if kind == "greater_than_equal":
        return name, f"{name} must be at least {context['ge']}"
    if kind == "less_than_equal":
        return name, f"{name} must be at most {context['le']}"
    return name, f"{name}: {detail['msg']}"


def argument_error(error: ValidationError) -> InvalidArgument:
    """A tool's refused arguments as engram's INVALID_ARGUMENT naming the first bad field
    (never pydantic's own text)."""
    field, message = _argument_message(error.errors()[0])
    return InvalidArgument(message, field=field)


class EngramMCPServer(MCPServer):
    """MCPServer whose argument refusals read like every other engram error, and whose
    resources/list lists the caller's documents (`documents`)."""

    documents: Lister | None = None
    # Each tool's body by name, and who calls (engram.agent_mcp.lean answers tools/call
    # with them); set by build_server.
    bodies: dict[str, ToolBody]
    callers: Callers

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies = {}

    def serve_subscriptions(self, bind: subscriptions.Binder) -> None:
        """Serves resources/subscribe and resources/unsubscribe (engram.agent_mcp
        .subscriptions); the SDK then advertises `resources.subscribe` in the revisions
        that have these methods, and only there."""
        subscribe, unsubscribe = subscriptions.handlers(bind)
        # MCPServer has no decorator for these; its low-level server takes any handler.
        low = self._lowlevel_server
        low.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
        low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        # The SDK lists only resources registered up front; a workspace's documents depend
        # on the caller, so the listing needs the request's context.
        listed = await self.list_resources()
        if self.documents is not None:
            listed += await self.documents(Context(request_context=ctx, mcp_server=self))
        return ListResourcesResult(resources=listed)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                raise ToolError(explain(argument_error(error.__cause__))) from None
            if type(error.__cause__) is ToolError:
                # The tool's own `CODE: message [REASON]`, without the SDK's "Error executing
                # tool <name>: " in front.
                raise ToolError(str(error.__cause__)) from None
            raise


# --- read your writes -------------------------------------------------------------------------


# The writes remembered for read-your-writes: per MCP session, caller and space, for an
# hour after a session's last write, and for at most this many of them.
SESSION_WRITES_TTL = 3600.0
MAX_SESSION_WRITES = 10_000

WritesKey = tuple[str, str, Space]


class SessionWrites:
    """The index positions of each MCP session's own writes, per caller and space (the
    latest per path), forgotten once a search finds the indexes past them."""

    def __init__(self) -> None:
        self._writes: TtlCache[WritesKey, dict[str, IndexPosition]] = TtlCache(
            ttl=SESSION_WRITES_TTL, size=MAX_SESSION_WRITES
        )

    def remember(self, key: WritesKey, position: IndexPosition | None) -> None:
        if position is not None:
            written = self._writes.get(key) or {}
            written[position.path] = position
            self._writes.put(key, written)

    def pending(self, key: WritesKey) -> list[IndexPosition]:
        return list((self._writes.get(key) or {}).values())

    def caught_up(self, key: WritesKey, positions: list[IndexPosition]) -> None:
        written = self._writes.get(key) or {}
        for position in positions:
            if written.get(position.path) == position:
                del written[position.path]


def _writes_key(ctx: Context[Any, Any], bound: Bound) -> WritesKey:
    """The MCP session (its Mcp-Session-Id over HTTP; stdio has one), caller and space."""
    headers = ctx.headers or {}
    return headers.get("mcp-session-id", ""), bound.caller, bound.space


def _bind(callers: Callers, ctx: Context[Any, Any], tool: str) -> Bound:
    """The call's caller, with one audit line per call naming it (hosted: per principal)."""
    with _tool_errors():
        return _bind_request(callers, ctx.request_context, tool)


def _bind_request(callers: Callers, ctx: ServerRequestContext[Any, Any], tool: str) -> Bound:
    bound = callers.bind(ctx.request)
    # The session's resource subscriptions follow its newest token (hosted tokens expire).
    subscriptions.present(ctx, bound)
    audited(tool, bound)
    return bound


def audited(tool: str, bound: Bound) -> None:
    """The audit line of one call (hosted: naming each agent's principal)."""
    if audit.isEnabledFor(logging.INFO):
        space = bound.space
        audit.info(
            "%s by %s in %s/%s",
            tool,
            bound.caller,
            space.visibility,
            space.name,
            extra={"tool": tool, "caller": bound.caller, "space": space.name},
        )


# A tool's body, without the SDK's Context: the call's caller, the key of its session's
# writes, and the validated arguments (engram.agent_mcp.lean calls it too).
ToolBody = Callable[..., Awaitable[BaseModel]]


def build_server(
    client: EngramClient,
    *,
    time_zone: str = "",
    session: str = "",
    callers: Callers | None = None,
    read_wait_ms: int = 5000,
) -> EngramMCPServer:
    """An MCP server whose four memory tools call WorkspaceService through `client`: as the
    process's own caller in its default space, or as each request's caller (`callers`,
    hosted). `time_zone` dates the daily logs (default UTC), `session` sends daily-log
    entries to this surface's own journal, daily/YYYY-MM-DD-<session>.md, and memory_search
    waits at most `read_wait_ms` for the session's own writes to be indexed (0: no wait)."""
    who: Callers = callers or ProcessCaller(client)
    server = EngramMCPServer(
        "engram",
        title="Engram memory",
        instructions=INSTRUCTIONS,
        version=engram.__version__,
        log_level="WARNING",
        # No subscriptions/listen: its bus fans an event out by URI across principals, and
        # every space's MEMORY.md has the same URI. Resource subscriptions are served where
        # a session has its own channel (serve_subscriptions; README: where and why).
        subscriptions=False,
    )
    server.callers = who
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tools = _Tools(server, who, SessionWrites(), time_zone, session, read_wait_ms, reads)
    _register_search(tools)
    _register_write(tools)
    _register_read(tools)
    _register_tree(tools)

    server.documents = resources.register(
        server, lambda ctx, what: _bind(who, ctx, what), time_zone=time_zone
    )
    server.serve_subscriptions(lambda ctx, what: _bind_request(who, ctx, what))
    return server


@dataclass(frozen=True)
class _Tools:
    """What every tool of one server shares."""

    server: EngramMCPServer
    who: Callers
    writes: SessionWrites
    time_zone: str
    session: str
    read_wait_ms: int
    reads: ToolAnnotations


def _register_search(tools: _Tools) -> None:
    async def search(
        bound: Bound, key: WritesKey, query: str, limit: int = 5, min_relevance: float | None = None
    ) -> MemorySearchResult:
        pending = tools.writes.pending(key) if tools.read_wait_ms > 0 else []
        with _tool_errors():
            found = await bound.client.memory_search(
                query,
                limit=limit,
                space=bound.space,
                min_positions=pending,
                max_wait_ms=tools.read_wait_ms if pending else 0,
                min_relevance=min_relevance,
            )
        behind = max(found.keyword_positions_behind, found.vector_positions_behind)
        if pending and behind == 0:
            tools.writes.caught_up(key, pending)
        return MemorySearchResult(
            query=found.query,
            results=[
                MemorySearchHit(
                    content=hit.content,
                    score=hit.score,
                    relevance=hit.relevance,
                    document_id=hit.document_id,
                    path=hit.path,
                    is_hybrid_match=hit.is_hybrid_match,
                )
                for hit in found.results
            ],
            result_count=found.result_count,
            waited_ms=found.waited_ms,
            writes_pending=behind,
        )

    @tools.server.tool(
        name="memory_search",
        title="Search memory",
        description=SEARCH_DESCRIPTION,
        annotations=tools.reads,
    )
    async def memory_search(
        query: Annotated[
            str, Field(strict=True, description="What to look for, in natural language.")
        ],
        ctx: Context[Any, Any],
        limit: Annotated[
            int, Field(strict=True, ge=1, le=20, description="Results to return, 1-20.")
        ] = 5,
        min_relevance: Annotated[
            float | None,
            Field(
                strict=True,
                ge=0,
                le=1,
                description="Answer nothing unless a passage is at least this likely "
                "relevant (0-1); omit for the server's default, 0 to always get passages.",
            ),
        ] = None,
    ) -> MemorySearchResult:
        bound = _bind(tools.who, ctx, "memory_search")
        key = _writes_key(ctx, bound)
        return await search(bound, key, query=query, limit=limit, min_relevance=min_relevance)

    tools.server.bodies["memory_search"] = search


def _register_write(tools: _Tools) -> None:
    async def write(
        bound: Bound, key: WritesKey, content: str, target: str = "daily_log", append: bool = True
    ) -> MemoryWriteResult:
        with _tool_errors():
            written = await bound.client.memory_write(
                content,
                target=target,
                append=append,
                time_zone=tools.time_zone,
                session=tools.session,
                space=bound.space,
            )
        tools.writes.remember(key, written.position)
        return MemoryWriteResult(
            status=written.status,
            path=written.path,
            append=written.append,
            content_length=written.content_length,
        )

    @tools.server.tool(
        name="memory_write",
        title="Write memory",
        description=WRITE_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False
        ),
    )
    async def memory_write(
        content: Annotated[str, Field(strict=True, description="What to write (Markdown).")],
        ctx: Context[Any, Any],
        target: Annotated[
            str,
            Field(
                strict=True,
                description='"memory", "daily_log", "heartbeat", or a relative .md path.',
            ),
        ] = "daily_log",
        append: Annotated[
            bool,
            Field(
                strict=True,
                description="Append (default) or, when false, replace the document.",
            ),
        ] = True,
    ) -> MemoryWriteResult:
        bound = _bind(tools.who, ctx, "memory_write")
        key = _writes_key(ctx, bound)
        return await write(bound, key, content=content, target=target, append=append)

    tools.server.bodies["memory_write"] = write


def _register_read(tools: _Tools) -> None:
    async def read(
        bound: Bound, key: WritesKey, path: str = "", date: str = ""
    ) -> MemoryReadResult:
        with _tool_errors():
            document = await bound.client.memory_read(
                path, space=bound.space, date=date, time_zone=tools.time_zone, session=tools.session
            )
        updated = document.updated_at
        return MemoryReadResult(
            path=document.path,
            content=document.content,
            word_count=document.word_count,
            updated_at=updated.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if updated
            else "",
        )

    @tools.server.tool(
        name="memory_read",
        title="Read memory",
        description=READ_DESCRIPTION,
        annotations=tools.reads,
    )
    async def memory_read(
        ctx: Context[Any, Any],
        path: Annotated[
            str,
            Field(strict=True, description='Document path, e.g. "MEMORY.md" (or give date).'),
        ] = "",
        date: Annotated[
            str,
            Field(
                strict=True,
                description='Instead of a path: "today", "yesterday" or YYYY-MM-DD, to read '
                "that day's daily log.",
            ),
        ] = "",
    ) -> MemoryReadResult:
        bound = _bind(tools.who, ctx, "memory_read")
        return await read(bound, _writes_key(ctx, bound), path=path, date=date)

    tools.server.bodies["memory_read"] = read


def _register_tree(tools: _Tools) -> None:
    async def tree(
        bound: Bound, key: WritesKey, path: str = "", depth: int = 1
    ) -> MemoryTreeResult:
        with _tool_errors():
            nodes = await bound.client.memory_tree(path, depth=depth, space=bound.space)
        return MemoryTreeResult(path=path, depth=depth, tree=[_tree(node) for node in nodes])

    @tools.server.tool(
        name="memory_tree",
        title="List memory",
        description=TREE_DESCRIPTION,
        annotations=tools.reads,
    )
    async def memory_tree(
        ctx: Context[Any, Any],
        path: Annotated[
            str,
            Field(strict=True, description='Directory to list, e.g. "daily"; empty for the root.'),
        ] = "",
        depth: Annotated[
            int, Field(strict=True, ge=1, le=10, description="Levels to descend, 1-10.")
        ] = 1,
    ) -> MemoryTreeResult:
        bound = _bind(tools.who, ctx, "memory_tree")
        return await tree(bound, _writes_key(ctx, bound), path=path, depth=depth)

    tools.server.bodies["memory_tree"] = tree


__all__ = ["EngramMCPServer", "SessionWrites", "argument_error", "build_server"]
