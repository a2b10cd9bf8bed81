"""`engram`: run the servers, and talk to them.

Start-up: this module and the command modules import typer and little else; everything
heavy (grpc, the generated messages, pydantic, the servers) is imported inside the commands
that use it, so `engram --help` and a client command start in well under 0.25 s of CPU
(bench/cli_startup.py measures it, tests/unit/test_cli_imports.py guards it).
"""

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from engram import __version__
from engram.cli.client import (
    DEFAULT_ADDR,
    VISIBILITIES,
    command_defaults,
    console,
    fail,
    typer_app,
    use_tls,
)

if TYPE_CHECKING:
    from engram.runtime.settings import Settings

# The command modules, in the order `engram --help` lists their commands, and the commands
# (or command groups) each registers. Only the invoked command's module is imported and
# built (each costs 5-30 ms of CPU, which every command would otherwise pay); `--help` and
# shell completion load them all. tests/unit/test_cli_lazy.py checks this table against
# what each module registers.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "storage_commands": ("write", "read", "ls", "rm", "du", "history", "export", "import"),
    "admin_commands": ("audit", "token", "quota"),
    "indexer_commands": ("reindex", "index-status"),
    "search_commands": ("search",),
    "mcp_command": ("mcp",),
    "memory_commands": ("memory",),
    "space_commands": ("where", "purge", "spaces"),
    "jobs_commands": ("jobs",),
    "watch_command": ("watch",),
    "files_commands": ("pull", "push"),
}
_MODULE_OF = {name: module for module, names in COMMAND_MODULES.items() for name in names}


class LazyCommands(TyperGroup):
    """engram's top-level group: builds a command module's commands when one of them is
    named (`engram ls` imports and builds engram.cli.storage_commands only)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._loaded: set[str] = set()

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module = _MODULE_OF.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            self._load(module, only=cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and self.get_command(ctx, args[0]) is None:
            self.list_commands(ctx)  # a name not known: "Did you mean" weighs every command
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command, as an eager Typer app would list them: the modules' commands in
        registration order, then this module's own (dev, serve), then the command groups."""
        for module in COMMAND_MODULES:
            self._load(module)
        own = [name for name in self.commands if name not in _MODULE_OF]
        lazy = [name for names in COMMAND_MODULES.values() for name in names]
        groups = [name for name in lazy if isinstance(self.commands[name], TyperGroup)]
        return [*(n for n in lazy if n not in groups), *own, *groups]

    def _load(self, module: str, *, only: str | None = None) -> None:
        """Builds the module's commands, or only the one named `only` (building a command
        costs ~3 M instructions: `engram ls` need not build the module's seven others)."""
        if module in self._loaded:
            return
        commands = typer_app()
        importlib.import_module(f"engram.cli.{module}").register(commands)
        if only is None:
            self._loaded.add(module)
        else:
            commands.registered_commands = [
                info for info in commands.registered_commands if _command_name(info) == only
            ]
            commands.registered_groups = [
                info for info in commands.registered_groups if _group_name(info) == only
            ]
        group = typer.main.get_group(commands)
        for name in COMMAND_MODULES[module] if only is None else (only,):
            if name not in self.commands:
                self.add_command(group.commands[name], name)


def _command_name(info: Any) -> str:
    return str(info.name or typer.main.get_command_name(info.callback.__name__))


def _group_name(info: Any) -> str:
    return str(info.name or info.typer_instance.info.name)


app = typer_app(
    name="engram",
    cls=LazyCommands,
    no_args_is_help=True,
    help="Memory and knowledge spaces for AI agents.\n\n"
    "The space and connection options below apply to every command (engram -v bot --project "
    "p1 --bot b1 -n runs ls); a command's own options win over them, and they win over their "
    "environment variables (ENGRAM_ADDR, ENGRAM_TOKEN, ENGRAM_VISIBILITY, ENGRAM_SPACE, "
    "ENGRAM_PROJECT, ENGRAM_BOT, ENGRAM_USER, ENGRAM_TENANT).",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"engram {__version__}")
        raise typer.Exit()


# The global options (before the command).
_AddrGlobal = Annotated[
    str,
    typer.Option("--addr", envvar="ENGRAM_ADDR", help="host:port of the engram server."),
]
_TokenGlobal = Annotated[
    str,
    typer.Option(
        "--token",
        envvar="ENGRAM_TOKEN",
        help="Bearer token (JWT or egm_...).",
        show_default=False,
    ),
]
_VisibilityGlobal = Annotated[
    str,
    typer.Option("--visibility", "-v", envvar="ENGRAM_VISIBILITY", help="|".join(VISIBILITIES)),
]
_NameGlobal = Annotated[
    str, typer.Option("--name", "-n", envvar="ENGRAM_SPACE", help="Space name.")
]
_ProjectGlobal = Annotated[
    str, typer.Option("--project", envvar="ENGRAM_PROJECT", help="Project qualifier.")
]
_BotGlobal = Annotated[str, typer.Option("--bot", envvar="ENGRAM_BOT", help="Bot qualifier.")]
_UserGlobal = Annotated[
    str, typer.Option("--user", envvar="ENGRAM_USER", help="User qualifier (user spaces).")
]
_TenantGlobal = Annotated[
    str, typer.Option("--tenant", envvar="ENGRAM_TENANT", help="Tenant (default: yours).")
]
_AsJsonGlobal = Annotated[
    bool, typer.Option("--json", help="Every command prints JSON instead of text.")
]
_TlsGlobal = Annotated[
    bool,
    typer.Option("--tls", envvar="ENGRAM_TLS", help="Talk TLS to the server."),
]
_CaGlobal = Annotated[
    Path | None,
    typer.Option(
        "--ca", envvar="ENGRAM_TLS_CA_FILE", help="CA certificate to trust (implies --tls)."
    ),
]
_CertGlobal = Annotated[
    Path | None,
    typer.Option("--cert", envvar="ENGRAM_TLS_CLIENT_CERT_FILE", help="Client certificate (mTLS)."),
]
_KeyGlobal = Annotated[
    Path | None,
    typer.Option("--key", envvar="ENGRAM_TLS_CLIENT_KEY_FILE", help="Client key (mTLS)."),
]
_ServerNameGlobal = Annotated[
    str | None,
    typer.Option(
        "--tls-server-name",
        envvar="ENGRAM_TLS_SERVER_NAME",
        help="Name to check in the server's certificate.",
    ),
]
_VersionGlobal = Annotated[
    bool,
    typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version."),
]


@app.callback()
def main_options(
    ctx: typer.Context,
    addr: _AddrGlobal = DEFAULT_ADDR,
    token: _TokenGlobal = "",
    visibility: _VisibilityGlobal = "private",
    name: _NameGlobal = "default",
    project: _ProjectGlobal = "",
    bot: _BotGlobal = "",
    user: _UserGlobal = "",
    tenant: _TenantGlobal = "",
    as_json: _AsJsonGlobal = False,
    tls: _TlsGlobal = False,
    ca: _CaGlobal = None,
    cert: _CertGlobal = None,
    key: _KeyGlobal = None,
    server_name: _ServerNameGlobal = None,
    version: _VersionGlobal = False,
) -> None:
    """Memory and knowledge spaces for AI agents.

    The space and connection options given here (before the command) apply to every
    command, e.g. `engram -v bot --project p1 --bot b1 -n runs ls`; a command's own options
    win over them. Their environment variables: ENGRAM_ADDR, ENGRAM_TOKEN,
    ENGRAM_VISIBILITY, ENGRAM_SPACE, ENGRAM_PROJECT, ENGRAM_BOT, ENGRAM_USER, ENGRAM_TENANT.
    """
    use_tls(tls, ca, cert, key, server_name)
    ctx.default_map = command_defaults(
        ctx.command,
        {
            "addr": addr,
            "token": token,
            "visibility": visibility,
            "name": name,
            "project": project,
            "bot": bot,
            "user": user,
            "tenant": tenant,
            "as_json": as_json,
        },
    )


def _tracing(service: str) -> None:
    """OpenTelemetry spans exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set."""
    from engram.domain.errors import EngramError
    from engram.runtime.tracing import configure_tracing

    try:
        configure_tracing(service)
    except EngramError as error:
        fail(error.message)


def _settings(**overrides: object) -> "Settings":
    """The settings of a server command (`dev`, `serve`); warnings go to its logs."""
    import logging

    from pydantic import ValidationError

    from engram.runtime.settings import Settings, SettingsFileError

    logging.captureWarnings(True)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    except SettingsFileError as error:
        fail(f"invalid settings: {error}")
    except ValidationError as error:
        problems = "; ".join(
            f"ENGRAM_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in error.errors()
        )
        fail(f"invalid settings: {problems}")


@app.command()
def dev(
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="State directory (default ./.engram).")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="gRPC port (default 50051).")] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Bind address (ENGRAM_GRPC_HOST; 0.0.0.0 for all)."),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", help="Prometheus port (0 = off).")
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Run a short demo once serving.")] = False,
    auth: Annotated[
        bool,
        typer.Option("--auth", help="Require tokens; prints an admin token for tenant `local`."),
    ] = False,
) -> None:
    """Run every service in one process on embedded backends.

    Logs are text and calls are not logged one by one (ENGRAM_LOG_FORMAT=json and
    ENGRAM_ACCESS_LOG=true give what `engram serve` logs by default)."""
    import asyncio

    from engram.app.embedded import embedded_engram
    from engram.domain.errors import EngramError
    from engram.runtime.gc_pauses import freeze_startup_heap
    from engram.runtime.logs import configure_logging
    from engram.runtime.malloc_tuning import keep_large_allocations_mapped
    from engram.runtime.server import PortInUse, check_ports_free, stop_on_signals
    from engram.runtime.working_dir import leave_unenterable_working_dir

    settings = _for_a_terminal(
        _settings(data_dir=data_dir, grpc_port=port, grpc_host=host, metrics_port=metrics_port)
    )
    configure_logging(settings.log_level, settings.log_format)
    settings = leave_unenterable_working_dir(settings)
    flags = {"ENGRAM_GRPC_PORT": "--port", "ENGRAM_METRICS_PORT": "--metrics-port"}
    try:
        check_ports_free(settings)  # before the model loads: a taken port fails at once
    except PortInUse as error:
        fail(_port_message(error, flags), code=1)
    _tracing("dev")

    async def main() -> None:
        keep_large_allocations_mapped()
        stop = asyncio.Event()
        async with embedded_engram(settings, require_auth=auth) as engram:
            freeze_startup_heap()
            stop_on_signals(stop.set)
            address = f"{settings.grpc_host}:{engram.port}"
            console.print(
                f"[bold green]engram dev[/] serving on [bold]{address}[/] "
                f"(data: {settings.data_dir.resolve()}, metrics: "
                f"{'off' if not engram.server.metrics_port else engram.server.metrics_port})",
                highlight=False,
            )
            token = ""
            if auth:
                token = engram.admin_token()
                console.print(
                    "auth on: callers need a token. Admin token for tenant local (ENGRAM_TOKEN):",
                    highlight=False,
                )
                console.print(token, soft_wrap=True, highlight=False)
            if demo:
                from engram.cli.demo import run_demo

                await run_demo(address, console, token=token)
                console.print("[dim]demo done; still serving - Ctrl-C to stop[/]")
            await stop.wait()

    try:
        asyncio.run(main())
    except EngramError as error:
        fail(error.message, code=1)
    except PortInUse as error:
        fail(_port_message(error, flags), code=1)
    except OSError as error:
        fail(str(error), code=1)


@app.command()
def serve(
    service: Annotated[
        str,
        typer.Argument(help="storage, quota, authz, indexer, search, workspace or maintenance"),
    ],
    port: Annotated[int | None, typer.Option("--port", help="gRPC port.")] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Bind address (ENGRAM_GRPC_HOST; 0.0.0.0 for all)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="search only: processes sharing the port, one per core "
            "(ENGRAM_SEARCH_WORKERS, default 1).",
        ),
    ] = None,
) -> None:
    """Run one service on the production backends configured by ENGRAM_* settings."""
    import asyncio

    from engram.app.production import PROCESSES, run_service
    from engram.domain.errors import EngramError
    from engram.runtime.logs import configure_logging
    from engram.runtime.server import PortInUse, check_ports_free
    from engram.runtime.working_dir import leave_unenterable_working_dir

    if service not in PROCESSES:
        fail(f"unknown service {service!r}; choose one of {', '.join(PROCESSES)}")
    if workers is not None and service != "search":
        fail(f"--workers applies to `engram serve search` only, not {service!r}")
    settings = _settings(grpc_port=port, grpc_host=host, search_workers=workers)
    configure_logging(settings.log_level, settings.log_format)
    settings = leave_unenterable_working_dir(settings)
    flags = {"ENGRAM_GRPC_PORT": "--port"}
    try:
        check_ports_free(settings)  # before the backends are reached
        _tracing(service)
        if service == "search":
            from engram.app.workers import serve_search

            if serve_search(settings):  # one process, or --workers of them
                fail("a search worker could not start (its error is above)", code=1)
            return
        asyncio.run(run_service(service, settings))
    except EngramError as error:
        fail(error.message, code=1)
    except PortInUse as error:
        fail(_port_message(error, flags), code=1)
    except OSError as error:
        fail(str(error), code=1)


def _for_a_terminal(settings: "Settings") -> "Settings":
    """`engram dev`'s defaults: text logs and no line per call, unless the settings say."""
    defaults = {"log_format": "text", "access_log": False}
    return settings.model_copy(
        update={k: v for k, v in defaults.items() if k not in settings.model_fields_set}
    )


def _port_message(error: OSError, flags: dict[str, str]) -> str:
    """The PortInUse message, with the command's flag for the port's setting."""
    from engram.runtime.server import OFF_HINT, PortInUse

    if not isinstance(error, PortInUse):
        return str(error)
    flag = flags.get(error.setting)
    choose = f"{flag} or {error.setting}" if flag else error.setting
    return (
        f"the {error.what} port {error.host}:{error.port} is already in use (another engram?): "
        f"stop what holds it, or choose another port with {choose}{OFF_HINT.get(error.what, '')}"
    )


def main() -> None:
    app()
