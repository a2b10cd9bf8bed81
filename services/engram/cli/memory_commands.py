"""`engram memory ...`: an agent's workspace through WorkspaceService (the memory tools),
over the typed client `engram.client`."""

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from engram.cli.client import (
    AddrOption,
    BotOption,
    JsonOption,
    NameOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    console,
    emit,
    err_console,
    fail,
    format_size,
    jsonable,
    read_input,
    tls_flags,
    typer_app,
)
from engram.cli.search_commands import snippet
from engram.domain.errors import EngramError, Unavailable

if TYPE_CHECKING:
    from rich.table import Table
    from rich.tree import Tree

    from engram.client import EngramClient, SearchResults, Space, TreeNode

T = TypeVar("T")

TARGET_HELP = "memory (MEMORY.md), daily_log (today's log), heartbeat (HEARTBEAT.md) or a .md path"
TzOption = Annotated[
    str,
    typer.Option(
        "--time-zone",
        "--tz",
        envvar="ENGRAM_TIME_ZONE",
        help="IANA time zone for the daily log's date (default UTC).",
    ),
]
SessionOption = Annotated[
    str, typer.Option("--session", help="Write to daily/YYYY-MM-DD-<session>.md instead.")
]

memory_app = typer_app(
    help="An agent's workspace: memory, daily logs, search, the system prompt.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")


def _space(visibility: str, name: str, project: str, bot: str, user: str, tenant: str) -> "Space":
    # SpaceFlags: a bot or project space without --project takes the directory's key.
    return SpaceFlags(visibility, name, project, bot, user, tenant).to_space()


def _failed(error: EngramError) -> NoReturn:
    """Prints `CODE: message [reason]` (never a traceback) and exits 1."""
    from engram.client import explain

    text = explain(error)
    if isinstance(error, Unavailable) and "peer" in error.metadata:
        # The server itself did not answer (no engram status came back).
        text += " (is the server running? see --addr)"
    fail(text, code=1)


def _run(
    addr: str, token: str, space: "Space", call: "Callable[[EngramClient], Awaitable[T]]"
) -> T:
    """Runs `call` with a client of `addr` for `space` (TLS as the global flags say); a
    failure is printed, exit code 1."""
    import asyncio

    from engram.client import EngramClient

    async def main() -> T:
        async with EngramClient(addr, token=token, space=space, tls=tls_flags() or False) as client:
            return await call(client)

    try:
        return asyncio.run(main())
    except EngramError as error:
        _failed(error)


@memory_app.command("write")
def write(
    content: Annotated[str, typer.Argument(help="What to write; '-' reads stdin.")],
    target: Annotated[str, typer.Option("--target", "-t", help=TARGET_HELP)] = "daily_log",
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace the document instead of appending.")
    ] = False,
    tz: TzOption = "",
    session: SessionOption = "",
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Write to MEMORY.md, today's daily log (default), HEARTBEAT.md or a path; appends."""
    text = read_input("-") if content == "-" else content
    space = _space(visibility, name, project, bot, user, tenant)
    result = _run(
        addr,
        token,
        space,
        lambda client: client.memory_write(
            text, target=target, append=False if replace else None, time_zone=tz, session=session
        ),
    )
    if as_json:
        emit(
            {
                "space": SpaceFlags(visibility, name, project, bot, user, tenant).label,
                **jsonable(result),
            }
        )
        return
    verb = "appended to" if result.append else "replaced"
    console.print(
        f"{result.status}: {verb} [bold]{result.path}[/] v{result.version} "
        f"(+{result.content_length} B, now {format_size(result.size_bytes)}) "
        f"sha256 {result.sha256[:12]}",
        highlight=False,
    )


@memory_app.command("log")
def log(
    entry: Annotated[str, typer.Argument(help="The entry; '-' reads stdin.")],
    tz: TzOption = "",
    session: SessionOption = "",
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Append one timestamped entry ([HH:MM:SS] ...) to today's daily log."""
    text = read_input("-") if entry == "-" else entry
    space = _space(visibility, name, project, bot, user, tenant)
    result = _run(
        addr,
        token,
        space,
        lambda client: client.append_daily_log(text, time_zone=tz, session=session),
    )
    if as_json:
        emit(jsonable(result))
        return
    console.print(
        f"appended to [bold]{result.path}[/] v{result.version} (+{result.content_length} B)",
        highlight=False,
    )


@memory_app.command("read")
def read(
    path: Annotated[str, typer.Argument(help="Document path, e.g. MEMORY.md")],
    meta: Annotated[bool, typer.Option("--meta", help="Print metadata to stderr too.")] = False,
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Print a workspace document to stdout."""
    space = _space(visibility, name, project, bot, user, tenant)
    document = _run(addr, token, space, lambda client: client.memory_read(path))
    if as_json:
        emit(jsonable(document))
        return
    if meta:
        err_console.print(
            f"{document.path} v{document.version} {document.word_count} words "
            f"sha256 {document.sha256} updated {_when(document.updated_at)}",
            highlight=False,
        )
    typer.echo(document.content, nl=not document.content.endswith("\n"))


def _when(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds") if moment else "-"


def add_tree_nodes(parent: "Tree", nodes: "Sequence[TreeNode]") -> None:
    """Adds memory_tree's nodes under `parent`, directories in bold."""
    from rich.markup import escape
    from rich.text import Text

    for node in nodes:
        if node.is_dir:
            add_tree_nodes(parent.add(f"[bold blue]{escape(node.name)}[/]"), node.children)
        else:
            parent.add(Text(node.name))


@memory_app.command("tree")
def tree(
    path: Annotated[str, typer.Option("--path", help="Directory to show ('' = root).")] = "",
    depth: Annotated[int, typer.Option("--depth", "-d", help="Levels, 1 to 10.")] = 1,
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Show the workspace (or a directory of it) as a tree, to a depth."""
    space = _space(visibility, name, project, bot, user, tenant)
    from rich.markup import escape
    from rich.tree import Tree

    nodes = _run(addr, token, space, lambda client: client.memory_tree(path, depth=depth))
    label = SpaceFlags(visibility, name, project, bot, user, tenant).label
    if as_json:
        emit({"space": label, "path": path, "nodes": [_node_record(node) for node in nodes]})
        return
    root = Tree(f"[bold]{escape(label)}[/]" + (f"/{escape(path)}" if path else ""))
    add_tree_nodes(root, nodes)
    console.print(root)


def _node_record(node: "TreeNode") -> dict[str, Any]:
    return {
        "name": node.name,
        "path": node.path,
        "is_dir": node.is_dir,
        "children": [_node_record(child) for child in node.children],
    }


def hits_table(found: "SearchResults", title: str = "") -> "Table":
    """memory_search's results, best first: path, score, found by both legs, a snippet."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title or None, title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("path", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("relevance", justify="right", no_wrap=True)
    table.add_column("hybrid", justify="center", no_wrap=True)
    table.add_column("text")
    for number, hit in enumerate(found.results, start=1):
        table.add_row(
            str(number),
            Text(hit.path),
            f"{hit.score:.3f}",
            f"{hit.relevance:.3f}",
            "yes" if hit.is_hybrid_match else "",
            Text(snippet(hit.content)),
        )
    return table


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    limit: Annotated[int, typer.Option("--limit", "-l", help="Results, 1 to 20.")] = 5,
    min_relevance: Annotated[
        float | None,
        typer.Option(
            "--min-relevance",
            min=0.0,
            max=1.0,
            help="No hits unless one is at least this likely relevant (default: the "
            "server's, 0.025; 0 always shows hits).",
        ),
    ] = None,
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Search the workspace by keywords and meaning together (memory_search)."""
    space = _space(visibility, name, project, bot, user, tenant)
    found = _run(
        addr,
        token,
        space,
        lambda client: client.memory_search(query, limit=limit, min_relevance=min_relevance),
    )
    if as_json:
        emit(jsonable(found))
        return
    table = hits_table(found)
    if found.results:
        console.print(table)
    for reason in found.degraded_reasons:
        console.print(f"[yellow]degraded:[/] {reason}", highlight=False)
    console.print(f"[dim]{found.result_count} result(s) for {found.query!r}[/]")


@memory_app.command("prompt")
def prompt(
    group: Annotated[
        bool, typer.Option("--group", help="A group context: leaves MEMORY.md out.")
    ] = False,
    tz: TzOption = "",
    sections: Annotated[
        bool, typer.Option("--sections", help="List the sections (sha256, path, name) instead.")
    ] = False,
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Print the assembled system prompt (identity files, memory, recent daily logs)."""
    space = _space(visibility, name, project, bot, user, tenant)
    assembled = _run(
        addr,
        token,
        space,
        lambda client: client.system_prompt(group_context=group, time_zone=tz),
    )
    if as_json:
        emit(jsonable(assembled))
        return
    if not sections:
        typer.echo(assembled.text, nl=not assembled.text.endswith("\n"))
        return
    from rich.text import Text

    # One line per section in sha256sum's shape, so a script can compare them.
    for section in assembled.sections:
        console.print(Text(f"{section.sha256}  {section.path}  {section.name}"))
    if assembled.bootstrapping:
        console.print("bootstrapping: BOOTSTRAP.md is in the prompt", highlight=False)
    if assembled.soul_changed:
        console.print("SOUL.md changed since the previous prompt", highlight=False)


@memory_app.command("seed")
def seed(
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Copy the default templates into the workspace; never overwrites a file."""
    space = _space(visibility, name, project, bot, user, tenant)
    result = _run(addr, token, space, lambda client: client.seed_workspace())
    if as_json:
        emit(jsonable(result))
        return
    for path in result.created_paths:
        console.print(f"[green]created[/] {path}", highlight=False)
    for path in result.existing_paths:
        console.print(f"[dim]exists[/]  {path}", highlight=False)
    console.print(
        f"[dim]{len(result.created_paths)} created, {len(result.existing_paths)} left alone[/]"
    )


@memory_app.command("bootstrap-done")
def bootstrap_done(
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """End onboarding: archive BOOTSTRAP.md, so prompts no longer carry it."""
    space = _space(visibility, name, project, bot, user, tenant)
    archived = _run(addr, token, space, lambda client: client.complete_bootstrap())
    if as_json:
        emit({"archived_path": archived})
        return
    console.print(f"archived BOOTSTRAP.md as [bold]{archived}[/]", highlight=False)
