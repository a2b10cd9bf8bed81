"""Client commands for StorageService: write, read, ls, rm, du, export, import, history.

Each command parses its options, makes one engram.client call and renders the answer.
"""

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    call,
    compact_time,
    console,
    emit,
    engram_client,
    err_console,
    fail,
    format_size,
    jsonable,
    read_input,
)
from engram.cli.progress import transfer_progress

if TYPE_CHECKING:
    from engram.client import Document, DocumentWrite, ImportResult, IndexPosition

STRATEGIES = ("skip", "overwrite", "rename")
OUTCOMES = ("created", "overwritten", "skipped", "renamed", "unchanged", "unsupported")
DOCUMENT_FIELDS = (
    "space_id",
    "path",
    "version",
    "sha256",
    "size_bytes",
    "word_count",
    "created_at",
    "updated_at",
    "updated_by",
    "document_id",
)

FileOption = Annotated[
    str | None, typer.Option("--file", "-f", help="Read content from a file (default: stdin).")
]
AppendOption = Annotated[bool, typer.Option("--append", "-a", help="Append instead of replace.")]
IfShaOption = Annotated[str, typer.Option("--if-sha", help="Only if the current sha256 is this.")]
CreateOnlyOption = Annotated[bool, typer.Option("--create-only", help="Only if absent.")]
AllowEmptyOption = Annotated[
    bool, typer.Option("--allow-empty", help="Write even when the input is empty.")
]
PathArgument = Annotated[str, typer.Argument(help="Document path.")]
RecursiveOption = Annotated[
    bool,
    typer.Option(
        "--recursive/--no-recursive",
        "-r/-R",
        help="The whole subtree, or only the directory's own entries.",
    ),
]
OutOption = Annotated[
    str | None,
    typer.Option(
        "--out",
        "-o",
        help="Where to write the .tar.gz (default or '-': stdout, never a terminal).",
        show_default=False,
    ),
]
InOption = Annotated[
    str | None,
    typer.Option(
        "--in",
        "-i",
        help="A .tar.gz of Markdown files (default or '-': stdin).",
        show_default=False,
    ),
]
StrategyOption = Annotated[str, typer.Option("--strategy", help="|".join(STRATEGIES))]
SkipUnsupportedOption = Annotated[
    bool,
    typer.Option(
        "--skip-unsupported",
        help="Leave out (and list) non-Markdown files and links, and an OpenClaw "
        "workspace's BOOTSTRAP.md and HEARTBEAT.md, instead of refusing the archive.",
    ),
]


def _space(
    visibility: str, name: str, project: str, bot: str, user: str, tenant: str
) -> SpaceFlags:
    return SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )


def _stamp(value: Any) -> Any:
    """`jsonable` with unset times as "" (the --json contract)."""
    found = jsonable(value)
    return "" if found is None else found


def document_record(doc: "Document", *, content: bool = False) -> dict[str, Any]:
    """A document's `--json` fields."""
    record: dict[str, Any] = {name: _stamp(getattr(doc, name)) for name in DOCUMENT_FIELDS}
    if content:
        record["content"] = doc.content
    return record


def position_record(position: "IndexPosition | None") -> dict[str, Any]:
    """An index position's `--json` fields (what a search's min_positions takes)."""
    if position is None:
        return {"space_id": "", "path": "", "document_id": "", "version": 0}
    return {
        "space_id": position.space_id,
        "path": position.path,
        "document_id": position.document_id,
        "version": position.version,
    }


def write(
    path: Annotated[str, typer.Argument(help="Document path, e.g. MEMORY.md")],
    file: FileOption = None,
    append: AppendOption = False,
    if_sha: IfShaOption = "",
    create_only: CreateOnlyOption = False,
    allow_empty: AllowEmptyOption = False,
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
    """Write a document from a file or stdin (empty input is refused: see --allow-empty)."""
    content = read_input(file, allow_empty=allow_empty)
    space = _space(visibility, name, project, bot, user, tenant).to_space()
    with engram_client(addr, token, space) as client:
        written = call(
            lambda: client.write_document(
                path, content, append=append, expected_sha256=if_sha, create_only=create_only
            )
        )
    render_write(written, append=append, as_json=as_json)


def render_write(written: "DocumentWrite", *, append: bool, as_json: bool) -> None:
    doc = written.document
    unchanged = written.bytes_delta == 0 and not append
    verb = "created" if written.created else ("unchanged" if unchanged else "updated")
    if as_json:
        emit(
            {
                "status": verb,
                "created": written.created,
                "bytes_delta": written.bytes_delta,
                **document_record(doc),
                # For a search's min_positions: a search that waits for this write.
                "position": position_record(written.position),
            }
        )
        return
    # typer.echo, not rich: a write is an everyday command and rich costs its import.
    typer.echo(
        f"{verb} {doc.path} v{doc.version} {format_size(doc.size_bytes)} "
        f"({written.bytes_delta:+d} B) sha256 {doc.sha256[:12]}"
    )


def read(
    path: PathArgument,
    version: Annotated[int, typer.Option("--version", help="Kept version (0 = current).")] = 0,
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
    """Print a document (or one of its kept versions) to stdout."""
    space = _space(visibility, name, project, bot, user, tenant).to_space()
    with engram_client(addr, token, space) as client:
        doc = call(lambda: client.read_document(path, version=version))
    if as_json:
        emit(document_record(doc, content=True))
        return
    if meta:
        err_console.print(
            f"{doc.path} v{doc.version} {format_size(doc.size_bytes)} {doc.word_count} words "
            f"sha256 {doc.sha256} updated {_stamp(doc.updated_at)} by {doc.updated_by}",
            highlight=False,
        )
    typer.echo(doc.content, nl=not doc.content.endswith("\n"))


def ls(
    directory: Annotated[str, typer.Argument(help="Directory ('' = root).")] = "",
    recursive: RecursiveOption = True,
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
    """Show a space (or a directory of it) as a tree."""
    space = _space(visibility, name, project, bot, user, tenant)
    directory = directory.strip("/")
    with engram_client(addr, token, space.to_space()) as client:
        found = client.iter_documents(directory, recursive=recursive, page_size=1000)
        entries = call(lambda: list(found))
    count = sum(0 if entry.is_dir else 1 for entry in entries)
    if as_json:
        emit(
            {
                "space": space.label,
                "dir": directory,
                "recursive": recursive,
                "documents": count,
                "entries": [{k: _stamp(v) for k, v in jsonable(e).items()} for e in entries],
            }
        )
        return
    # Drawn here rather than with rich's Tree: importing rich costs more CPU than the
    # whole listing (issue 17's start-up budget).
    label = space.label + (f"/{directory}" if directory else "")
    for line in tree_lines(label, directory, entries):
        typer.echo(line)
    typer.echo(f"{count} document(s)")


def rm(
    path: PathArgument,
    if_sha: IfShaOption = "",
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
    """Delete a document (its content stays readable through `history`)."""
    space = _space(visibility, name, project, bot, user, tenant).to_space()
    with engram_client(addr, token, space) as client:
        deleted = call(lambda: client.delete_document(path, expected_sha256=if_sha))
    if as_json:
        emit(
            {
                "path": path,
                "deleted": True,
                "deleted_bytes": int(deleted),
                "position": position_record(deleted.position),
            }
        )
        return
    typer.echo(f"deleted {path} ({format_size(deleted)})")


def du(
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
    """Show the space's usage and its tenant's."""
    from rich.table import Table

    space = _space(visibility, name, project, bot, user, tenant)
    with engram_client(addr, token, space.to_space()) as client:
        usage = call(client.get_usage)
    if as_json:
        emit({"space": space.label, **jsonable(usage)})
        return
    table = Table("scope", "used", "limit", "documents", title=space.label)
    table.add_row(
        "space",
        format_size(usage.used_bytes),
        format_size(usage.quota_bytes) if usage.quota_bytes else "none",
        str(usage.document_count),
    )
    table.add_row(
        "tenant", format_size(usage.tenant_used_bytes), format_size(usage.tenant_quota_bytes), ""
    )
    console.print(table)


def export_space(
    out: OutOption = None,
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
    """Export the space as a .tar.gz, to a file (--out) or to stdout (never a terminal)."""
    space = _space(visibility, name, project, bot, user, tenant)
    if out is None or out == "-":
        if as_json:
            fail("--json prints a summary on stdout; the archive cannot go there too (--out)")
        if sys.stdout.isatty():
            fail("stdout is a terminal: redirect it (> space.tar.gz) or pass --out FILE")
        size = _export(space, addr, token, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        err_console.print(f"exported {space.label} ({format_size(size)})", highlight=False)
        return
    target = Path(out)
    staging = target.with_name(target.name + ".partial")
    try:
        with staging.open("wb") as handle:
            size = _export(space, addr, token, handle)
    except typer.Exit:
        staging.unlink(missing_ok=True)
        raise
    staging.replace(target)
    if as_json:
        emit({"space": space.label, "out": str(target), "bytes": size})
        return
    console.print(f"exported to [bold]{target}[/] ({format_size(size)})", highlight=False)


def _export(space: SpaceFlags, addr: str, token: str, handle: Any) -> int:
    with (
        engram_client(addr, token, space.to_space()) as client,
        transfer_progress(f"exporting {space.label}", total=None) as advance,
    ):
        done = [0]

        def progress(total: int) -> None:
            advance(total - done[0])
            done[0] = total

        return call(lambda: client.export_space(handle, progress=progress))


def import_space(
    archive: InOption = None,
    strategy: StrategyOption = "skip",
    skip_unsupported: SkipUnsupportedOption = False,
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
    """Import a .tar.gz (--in, or stdin) into the space; a bad archive imports nothing.
    Every entry is counted once: created, overwritten, unchanged, renamed or skipped."""
    if strategy not in STRATEGIES:
        fail(f"--strategy must be one of {', '.join(STRATEGIES)}")
    data = _archive_bytes(archive)
    space = _space(visibility, name, project, bot, user, tenant)
    with (
        engram_client(addr, token, space.to_space()) as client,
        transfer_progress(f"importing into {space.label}", total=len(data)) as advance,
    ):
        done = [0]

        def progress(total: int) -> None:
            advance(total - done[0])
            done[0] = total

        result = call(
            lambda: client.import_space(
                data, strategy=strategy, skip_unsupported=skip_unsupported, progress=progress
            )
        )
    render_import(result, space.label, as_json=as_json)


def _archive_bytes(archive: str | None) -> bytes:
    if archive is None or archive == "-":
        if sys.stdin.isatty():
            fail("stdin is a terminal: pipe an archive in (< space.tar.gz) or pass --in FILE")
        return sys.stdin.buffer.read()
    source = Path(archive)
    if not source.is_file():
        fail(f"no such file: {archive}")
    return source.read_bytes()


def render_import(result: "ImportResult", label: str, *, as_json: bool) -> None:
    counts = import_counts(result)
    if as_json:
        emit(
            {
                "space": label,
                **counts,
                "entries_total": len(result.entries),
                "bytes": result.bytes,
                "entries": [jsonable(entry) for entry in result.entries],
            }
        )
        return
    summary = ", ".join(f"{value} {key}" for key, value in counts.items())
    console.print(
        f"imported {len(result.entries)} entries into {label}: {summary}; "
        f"{format_size(result.bytes)} written",
        highlight=False,
    )
    for entry in result.entries:
        if entry.outcome == "renamed":
            console.print(f"  {entry.path} -> {entry.stored_path}", highlight=False)
        elif entry.outcome == "unsupported":
            err_console.print(
                f"left out {entry.path}: {entry.detail}",
                style="yellow",
                markup=False,
                highlight=False,
            )


def history(
    path: PathArgument,
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
    """List a document's kept versions (restore one with read --version N | write)."""
    from rich.table import Table

    space = _space(visibility, name, project, bot, user, tenant)
    with engram_client(addr, token, space.to_space()) as client:
        found = client.iter_document_versions(path)
        versions = call(lambda: list(found))
    if as_json:
        fields = ("version", "sha256", "size_bytes", "updated_at", "updated_by", "current")
        records = [{f: _stamp(getattr(v, f)) for f in (*fields, "deleted")} for v in versions]
        emit({"space": space.label, "path": path, "versions": records})
        return
    table = Table(
        "version", "sha256", "size", "written (UTC)", "by", "", title=f"{space.label} {path}"
    )
    for item in versions:
        note = "current" if item.current else ("deleted" if item.deleted else "")
        table.add_row(
            str(item.version),
            item.sha256[:12],
            format_size(item.size_bytes),
            compact_time(item.updated_at),
            item.updated_by,
            note,
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    for command in (write, read, ls, rm, du, history):
        app.command()(command)
    app.command("export")(export_space)
    app.command("import")(import_space)


def tree_lines(label: str, directory: str, entries: Iterable[Any]) -> list[str]:
    """A listing drawn as a tree (`├── `, `└── `), directories with a trailing slash and
    documents with their size, in the listing's order."""
    # Each node: name -> (children, size or None for a directory).
    root: dict[str, Any] = {}
    for entry in entries:
        relative = entry.path[len(directory) + 1 if directory else 0 :]
        parts = relative.split("/")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        if entry.is_dir:
            node.setdefault(parts[-1] + "/", {})
        else:
            node[parts[-1]] = format_size(entry.size_bytes)
    lines = [label]

    def walk(node: dict[str, Any], indent: str) -> None:
        names = list(node)
        for index, name in enumerate(names):
            last = index == len(names) - 1
            value = node[name]
            text = f"{name} {value}" if isinstance(value, str) else name
            lines.append(f"{indent}{'└── ' if last else '├── '}{text}")
            if isinstance(value, dict):
                walk(value, indent + ("    " if last else "│   "))

    walk(root, "")
    return lines


def import_counts(result: Any) -> dict[str, int]:
    """Entries per outcome, every outcome named (zeros included), so they add up to the
    archive's entry count."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for entry in result.entries:
        counts[entry.outcome] = counts.get(entry.outcome, 0) + 1
    return counts
