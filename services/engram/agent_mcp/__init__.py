"""`engram mcp`: the memory tools (memory_search, memory_write, memory_read, memory_tree) as
a Model Context Protocol server over stdio or streamable HTTP, backed by WorkspaceService."""

from __future__ import annotations

from typing import Literal

from engram.agent_mcp.tools import build_server
from engram.client import EngramClient

Transport = Literal["stdio", "http"]
# Streamable HTTP serves at http://<host>:<port>/mcp.
HTTP_PATH = "/mcp"


async def serve(
    client: EngramClient,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    time_zone: str = "",
    session: str = "",
) -> None:
    """Serves the tools until the transport closes (stdin ends) or the task is cancelled."""
    server = build_server(client, time_zone=time_zone, session=session)
    if transport == "stdio":
        await server.run_stdio_async()
    else:
        await server.run_streamable_http_async(host=host, port=port, streamable_http_path=HTTP_PATH)


__all__ = ["HTTP_PATH", "Transport", "build_server", "serve"]
