"""What every client command shares: the channel, the space flags, error printing."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import grpc
import typer
from rich.console import Console

from engram.runtime.channels import ChannelConfig, ClientTls, open_sync_channel
from engram.runtime.errors import received_status
from engram.v1 import space_pb2

T = TypeVar("T")

err_console = Console(stderr=True, soft_wrap=True)
console = Console(soft_wrap=True)

DEFAULT_ADDR = "127.0.0.1:50051"

VISIBILITIES = {
    "private": space_pb2.VISIBILITY_PRIVATE,
    "bot": space_pb2.VISIBILITY_BOT,
    "project": space_pb2.VISIBILITY_PROJECT,
    "cross_project": space_pb2.VISIBILITY_CROSS_PROJECT,
    "user": space_pb2.VISIBILITY_USER,
    "org": space_pb2.VISIBILITY_ORG,
    "global": space_pb2.VISIBILITY_GLOBAL,
}

AddrOption = Annotated[
    str, typer.Option("--addr", envvar="ENGRAM_ADDR", help="host:port of the engram server.")
]
TokenOption = Annotated[
    str,
    typer.Option(
        "--token", envvar="ENGRAM_TOKEN", help="Bearer token (JWT or egm_...).", show_default=False
    ),
]
VisibilityOption = Annotated[
    str, typer.Option("--visibility", "-v", help="|".join(VISIBILITIES), envvar="ENGRAM_VISIBILITY")
]
NameOption = Annotated[str, typer.Option("--name", "-n", help="Space name.", envvar="ENGRAM_SPACE")]
ProjectOption = Annotated[str, typer.Option("--project", help="Project (bot/project spaces).")]
BotOption = Annotated[str, typer.Option("--bot", help="Bot (bot spaces).")]
UserOption = Annotated[str, typer.Option("--user", help="User (user spaces; default: you).")]
TenantOption = Annotated[
    str, typer.Option("--tenant", help="Tenant (default: yours; service principals must set it).")
]


@dataclass(frozen=True)
class SpaceFlags:
    visibility: str
    name: str
    project: str = ""
    bot: str = ""
    user: str = ""
    tenant: str = ""

    def to_proto(self) -> space_pb2.SpaceRef:
        visibility = VISIBILITIES.get(self.visibility)
        if visibility is None:
            fail(f"--visibility must be one of {', '.join(VISIBILITIES)}")
        return space_pb2.SpaceRef(
            visibility=visibility,
            name=self.name,
            project=self.project,
            bot=self.bot,
            user=self.user,
            tenant=self.tenant,
        )


def fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


# The global `--tls/--ca/--cert/--key` flags of this invocation (set by the app's callback).
_client_tls: ContextVar[ClientTls | None] = ContextVar("client_tls", default=None)


def use_tls(
    tls: bool, ca: Path | None, cert: Path | None, key: Path | None, server_name: str | None
) -> None:
    """Every channel of this invocation uses these TLS flags; any file implies --tls."""
    if not (tls or ca or cert or key):
        _client_tls.set(None)
        return
    try:
        _client_tls.set(
            ClientTls(ca_file=ca, cert_file=cert, key_file=key, server_name=server_name)
        )
    except ValueError:
        fail("--cert and --key go together (a client certificate for mTLS)")


def tls_flags() -> ClientTls | None:
    """The global TLS flags of this invocation (None: plaintext)."""
    return _client_tls.get()


@contextmanager
def channel(addr: str) -> Iterator[grpc.Channel]:
    """A channel to `addr`, with TLS as the global flags say (`engram --tls --ca ca.pem ...`)."""
    try:
        opened = open_sync_channel(addr, ChannelConfig(tls=_client_tls.get(), keepalive_seconds=0))
    except (OSError, ValueError) as error:  # a TLS file unreadable, an address list refused
        fail(str(error))
    with opened:
        yield opened


def explain(error: grpc.RpcError) -> str:
    """`CODE: message [reason]` from a failed call, without a traceback."""
    received = received_status(error)
    suffix = f" [{received.reason}]" if received.reason else ""
    return f"{received.code.name}: {received.message}{suffix}"


def call(function: Callable[[], T]) -> T:
    """Runs one RPC; prints the server's message (not a traceback) and exits on failure."""
    try:
        return function()
    except grpc.RpcError as error:
        received = received_status(error)
        if received.code == grpc.StatusCode.UNAVAILABLE and not received.reason:
            # No engram ErrorInfo: the server itself did not answer.
            fail(f"{explain(error)} (is the server running? see --addr, --tls, --ca)", code=1)
        fail(explain(error), code=1)


def read_input(path: str | None) -> str:
    if path is None or path == "-":
        return sys.stdin.read()
    if not os.path.exists(path):
        fail(f"no such file: {path}")
    with open(path, encoding="utf-8") as handle:
        return handle.read()
