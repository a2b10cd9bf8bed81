"""What every client command shares: the global options, the engram.client it calls, the
space flags, JSON output and error printing.

Start-up cost matters here (every `engram ...` pays it): this module imports typer and
nothing heavy. grpc, the generated messages, rich's renderables and pydantic are imported
inside the functions that need them, so `engram --help` never loads them
(tests/unit/test_cli_imports.py guards it).
"""

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, cast

import typer

from engram.runtime.sizes import format_size as format_size
from engram.runtime.sizes import parse_size as parse_size

if TYPE_CHECKING:
    from rich.console import Console

    from engram.client import Client, Space
    from engram.domain.errors import EngramError
    from engram.runtime.channels import ClientTls

T = TypeVar("T")

DEFAULT_ADDR = "127.0.0.1:50051"


class _LazyConsole:
    """A rich Console made on first use (importing rich.console costs ~30 ms of CPU)."""

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, soft_wrap=True)
        return getattr(self._console, attribute)


err_console = cast("Console", _LazyConsole(stderr=True))
console = cast("Console", _LazyConsole(stderr=False))

# Visibility names and their space_pb2.Visibility numbers (stable wire values).
VISIBILITIES = {
    "private": 1,
    "bot": 2,
    "project": 3,
    "cross_project": 4,
    "user": 5,
    "org": 6,
    "global": 7,
}
VISIBILITY_NAMES = {number: name for name, number in VISIBILITIES.items()}

# Per-command options carry no environment variable: the global options (engram.cli.app)
# read ENGRAM_ADDR, ENGRAM_TOKEN, ENGRAM_VISIBILITY, ENGRAM_SPACE, ENGRAM_PROJECT,
# ENGRAM_BOT, ENGRAM_USER and ENGRAM_TENANT, and hand their values to every command as its
# defaults, so a command's own option wins over a global one, which wins over the
# environment.
AddrOption = Annotated[str, typer.Option("--addr", help="host:port of the engram server.")]
TokenOption = Annotated[
    str,
    typer.Option("--token", help="Bearer token (JWT or egm_...).", show_default=False),
]
VisibilityOption = Annotated[str, typer.Option("--visibility", "-v", help="|".join(VISIBILITIES))]
NameOption = Annotated[str, typer.Option("--name", "-n", help="Space name.")]
ProjectOption = Annotated[str, typer.Option("--project", help="Project (bot/project spaces).")]
BotOption = Annotated[str, typer.Option("--bot", help="Bot (bot spaces).")]
UserOption = Annotated[str, typer.Option("--user", help="User (user spaces; default: you).")]
TenantOption = Annotated[
    str, typer.Option("--tenant", help="Tenant (default: yours; service principals must set it).")
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print JSON (stable field names) instead of text."),
]


def typer_app(**options: Any) -> typer.Typer:
    """A Typer app or command group with plain (click) help and plain tracebacks: typer's rich
    help imports markdown-it and pygments, ~0.2 s of CPU on every `--help`."""
    return typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, **options)


# Visibilities whose spaces belong to a project: without --project they take the current
# directory's project key (engram.cli.project_key).
PROJECT_VISIBILITIES = ("bot", "project")


@dataclass(frozen=True)
class SpaceFlags:
    visibility: str
    name: str
    project: str = ""
    bot: str = ""
    user: str = ""
    tenant: str = ""

    def __post_init__(self) -> None:
        if self.visibility in PROJECT_VISIBILITIES and not self.project:
            from engram.cli.project_key import current_project_key

            object.__setattr__(self, "project", current_project_key())

    def to_space(self) -> "Space":
        """The space as engram.client takes it."""
        from engram.client import Space
        from engram.domain.errors import InvalidSpaceRef

        try:
            return Space(
                visibility=self.visibility,
                name=self.name,
                project=self.project,
                bot=self.bot,
                user=self.user,
                tenant=self.tenant,
            )
        except InvalidSpaceRef:
            fail(f"--visibility must be one of {', '.join(VISIBILITIES)}")

    @property
    def label(self) -> str:
        """The space as `engram search --space` writes it: `bot:p1/b1/runs`, `private:notes`
        (with `@tenant` when one is named)."""
        qualifiers = [q for q in (self.project, self.bot, self.user) if q]
        text = f"{self.visibility}:" + "/".join([*qualifiers, self.name])
        return f"{text}@{self.tenant}" if self.tenant else text


def space_label(space_id: str) -> str:
    """A space id written the way --space takes it (without the tenant, which is yours)."""
    parts = space_id.split(":")
    if len(parts) != 7:
        return space_id
    _, visibility, _, project, bot, user, name = parts
    return f"{visibility}:" + "/".join(p for p in (project, bot, user, name) if p)


def fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def emit(document: Any) -> None:
    """One JSON document (or one JSON line of a stream) on stdout."""
    typer.echo(json.dumps(document, ensure_ascii=False, separators=(",", ":")))


def jsonable(value: Any) -> Any:
    """A client model (frozen dataclasses, tuples, datetimes) as JSON-ready values:
    datetimes become ISO 8601 UTC strings."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, datetime):
        moment = value.astimezone(UTC) if value.tzinfo else value
        return moment.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
    return value


def compact_time(value: datetime | None) -> str:
    """`2026-01-02 03:04` in UTC (16 columns, for tables that must fit 80)."""
    if value is None:
        return "-"
    moment = value.astimezone(UTC) if value.tzinfo else value
    return moment.strftime("%Y-%m-%d %H:%M")


# The global TLS flags of this invocation (set by the app's callback).
_client_tls: "ContextVar[ClientTls | None]" = ContextVar("client_tls", default=None)


def use_tls(
    tls: bool, ca: Path | None, cert: Path | None, key: Path | None, server_name: str | None
) -> None:
    """Every channel of this invocation uses these TLS flags; any file implies --tls."""
    if not (tls or ca or cert or key):
        _client_tls.set(None)
        return
    from engram.runtime.channels import ClientTls

    try:
        _client_tls.set(
            ClientTls(ca_file=ca, cert_file=cert, key_file=key, server_name=server_name)
        )
    except ValueError:
        fail("--cert and --key go together (a client certificate for mTLS)")


def tls_flags() -> "ClientTls | None":
    """The global TLS flags of this invocation (None: plaintext)."""
    return _client_tls.get()


# Parameter names the global options hand down as defaults. The space qualifiers go only to
# commands that address a space (they have a `visibility` option): `token create --user`
# names a token's user, not a user space.
CONNECTION_PARAMS = ("addr", "token", "as_json", "tenant")
SPACE_PARAMS = ("visibility", "name", "project", "bot", "user")


def command_defaults(command: Any, values: Mapping[str, object]) -> dict[str, Any]:
    """click's `default_map` for `command` and its subcommands: the global options' values
    for each parameter of the same name. A command's own option still wins (click reads the
    command line before the default map)."""
    names = {param.name for param in command.params}
    wanted = CONNECTION_PARAMS + (SPACE_PARAMS if "visibility" in names else ())
    defaults: dict[str, Any] = {
        name: values[name] for name in wanted if name in names and name in values
    }
    for sub_name, sub in getattr(command, "commands", {}).items():
        defaults[sub_name] = command_defaults(sub, values)
    return defaults


@contextmanager
def engram_client(addr: str, token: str, space: "Space | None" = None) -> "Iterator[Client]":
    """The blocking engram.client for this invocation: `addr`, the bearer `token`, TLS as
    the global flags say, and the space a command addresses."""
    from engram.client import Client
    from engram.domain.errors import EngramError

    tls = _client_tls.get()
    try:
        if tls is not None:
            tls.credentials()  # a TLS file that cannot be read is a usage error, said now
        opened = Client(addr, token=token, space=space, tls=tls or False)
    except OSError as error:
        fail(str(error))
    except EngramError as error:  # an address list refused
        fail(error.message)
    with opened:
        yield opened


def explain_error(error: "EngramError") -> str:
    """`CODE: message [REASON]` for a failed client call, with a hint when no server answered."""
    from engram.client import explain as explained

    text = explained(error)
    if error.metadata.get("code") == "UNAVAILABLE":
        # No engram ErrorInfo: the server itself did not answer.
        text += " (is the server running? see --addr, --tls, --ca)"
    return text


def call(function: Callable[[], T]) -> T:
    """Runs one client call; prints the server's message (not a traceback) and exits 1 on
    failure."""
    from engram.domain.errors import EngramError

    try:
        return function()
    except EngramError as error:
        fail(explain_error(error), code=1)


def read_input(path: str | None, *, allow_empty: bool = False) -> str:
    """A file's text, or stdin's for None or "-". On a terminal, says it is reading stdin;
    empty input is refused unless `allow_empty` (a mistyped redirection would otherwise
    empty a document)."""
    if path is None or path == "-":
        if sys.stdin.isatty():
            err_console.print(
                "[dim]reading stdin (end with Ctrl-D; or pass --file)[/]", highlight=False
            )
        text = sys.stdin.read()
        source = "stdin"
    else:
        if not os.path.exists(path):
            fail(f"no such file: {path}")
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        source = path
    if not text and not allow_empty:
        fail(f"{source} is empty; pass --allow-empty to write an empty document")
    return text
