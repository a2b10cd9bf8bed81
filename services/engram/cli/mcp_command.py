"""`engram mcp`: serve the memory tools to an MCP host (stdio) or over streamable HTTP."""

from typing import Annotated
from urllib.parse import urlsplit

import typer

from engram.cli.client import (
    DEFAULT_ADDR,
    AddrOption,
    BotOption,
    NameOption,
    ProjectOption,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    err_console,
    fail,
    tls_flags,
)
from engram.domain.errors import EngramError

TRANSPORTS = ("stdio", "http")
MAX_READ_WAIT_MS = 60_000
# The option each refused setting comes from.
OPTIONS = {"time_zone": "--time-zone: ", "session": "--session: "}


def _option(error: EngramError) -> str:
    return OPTIONS.get(getattr(error, "field", ""), "")


def _url(value: str) -> bool:
    parsed = urlsplit(value)
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)


def _check_hosting(transport: str, token: str, issuer: str, resource_url: str) -> None:
    if transport != "http":
        fail("--hosted serves over HTTP: add --transport http")
    if token:
        fail("--hosted uses each caller's own token: drop --token (and ENGRAM_TOKEN)")
    if not _url(issuer):
        fail("--hosted needs --issuer, the http(s) URL of the server issuing the callers' tokens")
    if resource_url and not _url(resource_url):
        fail("--resource-url must be an http(s) URL")


def register(app: typer.Typer) -> None:
    @app.command()
    def mcp(
        transport: Annotated[
            str, typer.Option("--transport", "-t", help="stdio (for an MCP host) or http.")
        ] = "stdio",
        host: Annotated[
            str, typer.Option("--host", help="HTTP bind address (loopback by default).")
        ] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", help="HTTP port.")] = 8765,
        time_zone: Annotated[
            str,
            typer.Option(
                "--time-zone",
                "--tz",
                envvar="ENGRAM_TIME_ZONE",
                help="IANA zone of daily logs (UTC).",
            ),
        ] = "",
        session: Annotated[
            str,
            typer.Option(
                "--session",
                help="Daily-log entries go to daily/YYYY-MM-DD-<session>.md (this surface's).",
            ),
        ] = "",
        hosted: Annotated[
            bool,
            typer.Option(
                "--hosted",
                help="HTTP for many agents: each request carries its own bearer token and "
                "names its space in the path (/mcp/<visibility>/<name>); no --token.",
            ),
        ] = False,
        issuer: Annotated[
            str,
            typer.Option(
                "--issuer",
                envvar="ENGRAM_MCP_ISSUER",
                help="Hosted: URL of the authorization server issuing the callers' tokens "
                "(named in the RFC 9728 metadata).",
            ),
        ] = "",
        resource_url: Annotated[
            str,
            typer.Option(
                "--resource-url",
                envvar="ENGRAM_MCP_RESOURCE_URL",
                help="Hosted: this endpoint's public URL (default http://<host>:<port>/mcp).",
            ),
        ] = "",
        authz_addr: Annotated[
            str,
            typer.Option(
                "--authz-addr",
                envvar="ENGRAM_AUTHZ_ADDR",
                help="Hosted: AuthzService, which verifies the callers' tokens (default --addr).",
            ),
        ] = "",
        read_wait_ms: Annotated[
            int,
            typer.Option(
                "--read-wait-ms",
                help="memory_search waits at most this long for the session's own writes to "
                "be indexed (0: no wait).",
            ),
        ] = 5000,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = DEFAULT_ADDR,
        token: TokenOption = "",
    ) -> None:
        """Serve memory_search, memory_write, memory_read and memory_tree over MCP, in one
        space (the agent's workspace), calling the engram server at --addr."""
        import asyncio

        from engram.agent_mcp import HTTP_PATH, Hosting, serve
        from engram.client import EngramClient, Space
        from engram.domain import workspace as rules

        if transport not in TRANSPORTS:
            fail(f"--transport must be one of {', '.join(TRANSPORTS)}")
        if not 0 < port < 65536:
            fail("--port must be 1..65535")
        if not 0 <= read_wait_ms <= MAX_READ_WAIT_MS:
            fail(f"--read-wait-ms must be 0..{MAX_READ_WAIT_MS}")
        try:
            space = Space(visibility, name, project, bot, user, tenant)
            rules.time_zone(time_zone)
            rules.session_name(session)
        except EngramError as error:
            fail(f"{_option(error)}{error.message}")
        if hosted:
            _check_hosting(transport, token, issuer, resource_url)

        async def main() -> None:
            # The global --tls/--ca/--cert/--key flags (ENGRAM_TLS_*) reach the server too.
            tls = tls_flags() or False
            async with (
                EngramClient(addr, token=token, space=space, tls=tls) as client,
                EngramClient(authz_addr or addr, tls=tls) as authz,
            ):
                if transport == "http":
                    err_console.print(
                        f"engram mcp: streamable HTTP on http://{host}:{port}{HTTP_PATH} "
                        + (
                            f"(engram at {addr}, each request's own token and space)"
                            if hosted
                            else f"(engram at {addr}, space {visibility}/{name})"
                        ),
                        highlight=False,
                    )
                await serve(
                    client,
                    transport="http" if transport == "http" else "stdio",
                    host=host,
                    port=port,
                    time_zone=time_zone,
                    session=session,
                    hosting=Hosting(authz, issuer, resource_url) if hosted else None,
                    read_wait_ms=read_wait_ms,
                )

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            pass
        except OSError as error:
            fail(str(error), code=1)
