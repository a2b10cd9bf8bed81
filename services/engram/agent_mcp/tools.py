"""The four memory tools as Model Context Protocol tools, answered by WorkspaceService.

Each tool calls the workspace through `EngramClient`; its JSON output is one of the pydantic
models below (the tool's output schema). A failed call comes back to the model as an MCP tool
error carrying the server's message, e.g. `PERMISSION_DENIED: ... [PROTECTED_FILE]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

import engram
from engram.client import EngramClient, TreeNode, explain
from engram.domain.errors import EngramError

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
append=false replaces the whole document, so read it first. Call it when the user states a
preference, makes a decision, asks you to remember something, or a piece of work is done.
IDENTITY.md, SOUL.md, AGENTS.md and USER.md are protected: writing them fails."""

READ_DESCRIPTION = """\
Read one memory document in full by its path (e.g. "MEMORY.md", "daily/2026-12-01.md", or a
path returned by memory_search or memory_tree). Use it when a search hit needs its
surrounding context, or to see a document before replacing it."""

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


def build_server(client: EngramClient, *, time_zone: str = "", session: str = "") -> MCPServer:
    """An MCP server whose four memory tools call WorkspaceService through `client`
    (in its default space); `time_zone` dates the daily logs (default UTC), and `session`
    sends daily-log entries to this surface's own journal, daily/YYYY-MM-DD-<session>.md."""
    server: MCPServer = MCPServer(
        "engram",
        title="Engram memory",
        instructions=INSTRUCTIONS,
        version=engram.__version__,
        log_level="WARNING",
    )
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(
        name="memory_search",
        title="Search memory",
        description=SEARCH_DESCRIPTION,
        annotations=reads,
    )
    async def memory_search(
        query: Annotated[str, Field(description="What to look for, in natural language.")],
        limit: Annotated[int, Field(ge=1, le=20, description="Results to return, 1-20.")] = 5,
        min_relevance: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="Answer nothing unless a passage is at least this likely "
                "relevant (0-1); omit for the server's default, 0 to always get passages.",
            ),
        ] = None,
    ) -> MemorySearchResult:
        with _tool_errors():
            found = await client.memory_search(query, limit=limit, min_relevance=min_relevance)
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
        )

    @server.tool(
        name="memory_write",
        title="Write memory",
        description=WRITE_DESCRIPTION,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False
        ),
    )
    async def memory_write(
        content: Annotated[str, Field(description="What to write (Markdown).")],
        target: Annotated[
            str,
            Field(description='"memory", "daily_log", "heartbeat", or a relative .md path.'),
        ] = "daily_log",
        append: Annotated[
            bool, Field(description="Append (default) or, when false, replace the document.")
        ] = True,
    ) -> MemoryWriteResult:
        with _tool_errors():
            written = await client.memory_write(
                content, target=target, append=append, time_zone=time_zone, session=session
            )
        return MemoryWriteResult(
            status=written.status,
            path=written.path,
            append=written.append,
            content_length=written.content_length,
        )

    @server.tool(
        name="memory_read", title="Read memory", description=READ_DESCRIPTION, annotations=reads
    )
    async def memory_read(
        path: Annotated[str, Field(description='Document path, e.g. "MEMORY.md".')],
    ) -> MemoryReadResult:
        with _tool_errors():
            document = await client.memory_read(path)
        updated = document.updated_at
        return MemoryReadResult(
            path=document.path,
            content=document.content,
            word_count=document.word_count,
            updated_at=updated.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if updated
            else "",
        )

    @server.tool(
        name="memory_tree", title="List memory", description=TREE_DESCRIPTION, annotations=reads
    )
    async def memory_tree(
        path: Annotated[
            str, Field(description='Directory to list, e.g. "daily"; empty for the root.')
        ] = "",
        depth: Annotated[int, Field(ge=1, le=10, description="Levels to descend, 1-10.")] = 1,
    ) -> MemoryTreeResult:
        with _tool_errors():
            nodes = await client.memory_tree(path, depth=depth)
        return MemoryTreeResult(path=path, depth=depth, tree=[_tree(node) for node in nodes])

    return server
