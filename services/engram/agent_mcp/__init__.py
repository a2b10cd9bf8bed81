"""`engram mcp`: the memory tools (memory_search, memory_write, memory_read, memory_tree) as
a Model Context Protocol server over stdio or streamable HTTP, backed by WorkspaceService.

Over stdio, and over HTTP without `hosted`, every call acts with the process's own token in
its one space. Hosted (engram.agent_mcp.hosted), every HTTP request carries its own bearer
token and names its space in the path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import uvicorn

from engram.agent_mcp.callers import HostedCallers
from engram.agent_mcp.hosted import HTTP_PATH, EngramTokenVerifier, hosted_app
from engram.agent_mcp.tools import build_server
from engram.client import EngramClient

Transport = Literal["stdio", "http"]


@dataclass(frozen=True, slots=True)
class Hosting:
    """A hosted endpoint: `authz` verifies the callers' tokens (AuthzService), `issuer` is
    the authorization server the RFC 9728 metadata names, `resource_url` this endpoint's
    public URL (http://<host>:<port>/mcp when empty)."""

    authz: EngramClient
    issuer: str
    resource_url: str = ""
    cache_seconds: float = 30.0


async def serve(
    client: EngramClient,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    time_zone: str = "",
    session: str = "",
    hosting: Hosting | None = None,
    read_wait_ms: int = 5000,
) -> None:
    """Serves the tools until the transport closes (stdin ends) or the task is cancelled."""
    callers = HostedCallers(client) if hosting is not None else None
    server = build_server(
        client, time_zone=time_zone, session=session, callers=callers, read_wait_ms=read_wait_ms
    )
    if transport == "stdio":
        await server.run_stdio_async()
    elif hosting is None:
        await server.run_streamable_http_async(host=host, port=port, streamable_http_path=HTTP_PATH)
    else:
        verifier = EngramTokenVerifier(
            hosting.authz, issuer=hosting.issuer, cache_seconds=hosting.cache_seconds
        )
        app = hosted_app(
            server,
            verifier,
            resource_url=hosting.resource_url or f"http://{host}:{port}{HTTP_PATH}",
            issuer=hosting.issuer,
            host=host,
        )
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        await uvicorn.Server(config).serve()


__all__ = ["HTTP_PATH", "Hosting", "Transport", "build_server", "serve"]
