"""`engram mcp`: serve the memory tools to an MCP host (stdio) or over streamable HTTP."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated
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

if TYPE_CHECKING:
    from engram.client import Space

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


TransportOption = Annotated[
    str, typer.Option("--transport", "-t", help="stdio (for an MCP host) or http.")
]
HostOption = Annotated[str, typer.Option("--host", help="HTTP bind address (loopback by default).")]
PortOption = Annotated[int, typer.Option("--port", help="HTTP port.")]
TimeZoneOption = Annotated[
    str,
    typer.Option(
        "--time-zone",
        "--tz",
        envvar="ENGRAM_TIME_ZONE",
        help="IANA zone of daily logs (UTC).",
    ),
]
SessionOption = Annotated[
    str,
    typer.Option(
        "--session",
        help="Daily-log entries go to daily/YYYY-MM-DD-<session>.md (this surface's).",
    ),
]
HostedOption = Annotated[
    bool,
    typer.Option(
        "--hosted",
        help="HTTP for many agents: each request carries its own bearer token and "
        "names its space in the path (/mcp/<visibility>/<name>); no --token.",
    ),
]
IssuerOption = Annotated[
    str,
    typer.Option(
        "--issuer",
        envvar="ENGRAM_MCP_ISSUER",
        help="Hosted: URL of the authorization server issuing the callers' tokens "
        "(named in the RFC 9728 metadata).",
    ),
]
ResourceUrlOption = Annotated[
    str,
    typer.Option(
        "--resource-url",
        envvar="ENGRAM_MCP_RESOURCE_URL",
        help="Hosted: this endpoint's public URL (default http://<host>:<port>/mcp).",
    ),
]
AuthzAddrOption = Annotated[
    str,
    typer.Option(
        "--authz-addr",
        envvar="ENGRAM_AUTHZ_ADDR",
        help="Hosted: AuthzService, which verifies the callers' tokens (default --addr).",
    ),
]
ReadWaitOption = Annotated[
    int,
    typer.Option(
        "--read-wait-ms",
        help="memory_search waits at most this long for the session's own writes to "
        "be indexed (0: no wait).",
    ),
]


def register(app: typer.Typer) -> None:
    @app.command()
    def mcp(
        transport: TransportOption = "stdio",
        host: HostOption = "127.0.0.1",
        port: PortOption = 8765,
        time_zone: TimeZoneOption = "",
        session: SessionOption = "",
        hosted: HostedOption = False,
        issuer: IssuerOption = "",
        resource_url: ResourceUrlOption = "",
        authz_addr: AuthzAddrOption = "",
        read_wait_ms: ReadWaitOption = 5000,
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

        import uvloop

        from engram.client import Space
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
        served = _Served(transport, host, port, time_zone, session, read_wait_ms)
        hosting = (issuer, resource_url) if hosted else None
        try:
            # Over HTTP the loop carries every agent's requests: uvloop's costs less per
            # request than asyncio's own (bench/mcp_bench.py). Stdio serves one agent.
            loop = uvloop.new_event_loop if transport == "http" else None
            with asyncio.Runner(loop_factory=loop) as runner:
                runner.run(_serve(served, space, addr, token, authz_addr or addr, hosting))
        except KeyboardInterrupt:
            pass
        except OSError as error:
            fail(str(error), code=1)


@dataclass(frozen=True)
class _Served:
    """How the tools are served: the checked transport options."""

    transport: str
    host: str
    port: int
    time_zone: str
    session: str
    read_wait_ms: int


async def _serve(
    served: _Served,
    space: "Space",
    addr: str,
    token: str,
    authz_addr: str,
    hosting: tuple[str, str] | None,
) -> None:
    """Serves the tools until interrupted; `hosting` is (issuer, resource URL) when hosted."""
    from engram.agent_mcp import HTTP_PATH, Hosting, serve
    from engram.client import EngramClient

    # The global --tls/--ca/--cert/--key flags (ENGRAM_TLS_*) reach the server too.
    tls = tls_flags() or False
    async with (
        EngramClient(addr, token=token, space=space, tls=tls) as client,
        EngramClient(authz_addr, tls=tls) as authz,
    ):
        if served.transport == "http":
            err_console.print(
                f"engram mcp: streamable HTTP on http://{served.host}:{served.port}{HTTP_PATH} "
                + (
                    f"(engram at {addr}, each request's own token and space)"
                    if hosting
                    else f"(engram at {addr}, space {space.visibility}/{space.name})"
                ),
                highlight=False,
            )
        await serve(
            client,
            transport="http" if served.transport == "http" else "stdio",
            host=served.host,
            port=served.port,
            time_zone=served.time_zone,
            session=served.session,
            hosting=Hosting(authz, *hosting) if hosting else None,
            read_wait_ms=served.read_wait_ms,
        )
