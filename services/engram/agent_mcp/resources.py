"""The workspace's documents as MCP resources, and the assembled system prompt as an MCP
prompt, for the call's caller in its space (engram.agent_mcp.callers).

- Resources: every document is `engram://workspace/<path>` (text/markdown), listed from the
  workspace's tree and read through memory_read, so the workspace's rules hold; a session
  with a server->client channel may subscribe to them (engram.agent_mcp.subscriptions).
- Prompt `system_prompt`: GetSystemPrompt's text (the identity files, MEMORY.md unless
  `group_context`, the recent daily logs), as one user message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import Resource as MCPResource

from engram.agent_mcp.callers import Bound
from engram.client import TreeNode, explain
from engram.domain.errors import EngramError

SCHEME = "engram://workspace/"
TEMPLATE = SCHEME + "{+path}"
MARKDOWN = "text/markdown"
# memory_tree's deepest listing: resources list the documents this far down.
MAX_DEPTH = 10

Binder = Callable[[Context[Any, Any], str], Bound]
Lister = Callable[[Context[Any, Any]], Awaitable[list[MCPResource]]]


def resource_uri(path: str) -> str:
    return SCHEME + path


def _files(nodes: tuple[TreeNode, ...] | list[TreeNode]) -> Iterator[TreeNode]:
    for node in nodes:
        if node.is_dir:
            yield from _files(node.children)
        else:
            yield node


def register(server: MCPServer, bind: Binder, *, time_zone: str) -> Lister:
    """Adds the document template and the system prompt to `server`; returns the listing of
    the caller's documents (the server's resources/list)."""

    @server.resource(
        TEMPLATE,
        name="memory document",
        title="Memory document",
        description="A document of your memory workspace, by its path.",
        mime_type=MARKDOWN,
    )
    async def document(path: str, ctx: Context[Any, Any]) -> str:
        bound = bind(ctx, "resources/read")
        try:
            found = await bound.client.memory_read(path, space=bound.space)
        except EngramError as error:
            raise ResourceError(explain(error)) from None
        return found.content

    @server.prompt(
        name="system_prompt",
        title="Memory system prompt",
        description="Your identity files, MEMORY.md (left out in group contexts) and the "
        "recent daily logs, assembled as the system prompt of a conversation.",
    )
    async def system_prompt(
        ctx: Context[Any, Any],
        group_context: Literal["true", "false"] = "false",
        layout: Literal["", "000", "004"] = "",
    ) -> str:
        bound = bind(ctx, "prompts/get")
        try:
            prompt = await bound.client.system_prompt(
                group_context=group_context == "true",
                time_zone=time_zone,
                space=bound.space,
                layout=layout,
            )
        except EngramError as error:
            raise ValueError(explain(error)) from None
        return prompt.text

    async def listing(ctx: Context[Any, Any]) -> list[MCPResource]:
        bound = bind(ctx, "resources/list")
        try:
            nodes = await bound.client.memory_tree("", depth=MAX_DEPTH, space=bound.space)
        except EngramError as error:
            raise ResourceError(explain(error)) from None
        return [
            MCPResource(uri=resource_uri(node.path), name=node.path, mime_type=MARKDOWN)
            for node in _files(nodes)
        ]

    return listing
