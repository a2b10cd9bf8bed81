"""`engram mcp`: serve the memory tools to an MCP host (stdio) or over streamable HTTP."""

from typing import Annotated

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

        from engram.agent_mcp import HTTP_PATH, serve
        from engram.client import EngramClient, Space

        if transport not in TRANSPORTS:
            fail(f"--transport must be one of {', '.join(TRANSPORTS)}")
        if not 0 < port < 65536:
            fail("--port must be 1..65535")
        try:
            space = Space(visibility, name, project, bot, user, tenant)
        except EngramError as error:
            fail(error.message)

        async def main() -> None:
            # The global --tls/--ca/--cert/--key flags (ENGRAM_TLS_*) reach the server too.
            tls = tls_flags() or False
            async with EngramClient(addr, token=token, space=space, tls=tls) as client:
                if transport == "http":
                    err_console.print(
                        f"engram mcp: streamable HTTP on http://{host}:{port}{HTTP_PATH} "
                        f"(engram at {addr}, space {visibility}/{name})",
                        highlight=False,
                    )
                await serve(
                    client,
                    transport="http" if transport == "http" else "stdio",
                    host=host,
                    port=port,
                    time_zone=time_zone,
                    session=session,
                )

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            pass
        except OSError as error:
            fail(str(error), code=1)
