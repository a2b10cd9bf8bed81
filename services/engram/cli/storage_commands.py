"""Client commands for StorageService: write, read, ls, rm, du, export, import, history."""

import sys
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

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
    channel,
    compact_time,
    console,
    emit,
    err_console,
    fail,
    format_size,
    metadata,
    read_input,
    timestamp,
)
from engram.cli.progress import transfer_progress

if TYPE_CHECKING:
    from engram.v1 import document_pb2

IMPORT_CHUNK = 256 * 1024
# ImportStrategy numbers of storage.proto.
STRATEGIES = {"skip": 1, "overwrite": 2, "rename": 3}


def _space(
    visibility: str, name: str, project: str, bot: str, user: str, tenant: str
) -> SpaceFlags:
    return SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )


def document_record(doc: "document_pb2.Document", *, content: bool = False) -> dict[str, Any]:
    """A document's `--json` fields."""
    record: dict[str, Any] = {
        "space_id": doc.space_id,
        "path": doc.path,
        "version": doc.version,
        "sha256": doc.sha256,
        "size_bytes": doc.size_bytes,
        "word_count": doc.word_count,
        "created_at": timestamp(doc.created_at),
        "updated_at": timestamp(doc.updated_at),
        "updated_by": doc.updated_by,
        "document_id": doc.document_id,
    }
    if content:
        record["content"] = doc.content
    return record


def position_record(position: Any) -> dict[str, Any]:
    """An IndexPosition's `--json` fields (what SearchRequest.min_positions takes)."""
    return {
        "space_id": position.space_id,
        "path": position.path,
        "document_id": position.document_id,
        "version": position.version,
    }


def register(app: typer.Typer) -> None:
    @app.command()
    def write(
        path: Annotated[str, typer.Argument(help="Document path, e.g. MEMORY.md")],
        file: Annotated[
            str | None,
            typer.Option("--file", "-f", help="Read content from a file (default: stdin)."),
        ] = None,
        append: Annotated[
            bool, typer.Option("--append", "-a", help="Append instead of replace.")
        ] = False,
        if_sha: Annotated[
            str, typer.Option("--if-sha", help="Only if the current sha256 is this.")
        ] = "",
        create_only: Annotated[bool, typer.Option("--create-only", help="Only if absent.")] = False,
        allow_empty: Annotated[
            bool,
            typer.Option("--allow-empty", help="Write even when the input is empty."),
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
        """Write a document from a file or stdin (empty input is refused: see --allow-empty)."""
        from engram.v1 import storage_pb2, storage_pb2_grpc

        content = read_input(file, allow_empty=allow_empty)
        request = storage_pb2.WriteDocumentRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto(),
            path=path,
            content=content,
            mode=storage_pb2.WRITE_MODE_APPEND if append else storage_pb2.WRITE_MODE_REPLACE,
            expected_sha256=if_sha,
            create_only=create_only,
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(lambda: stub.WriteDocument(request, metadata=metadata(token)))
        doc = response.document
        verb = (
            "created"
            if response.created
            else ("unchanged" if response.bytes_delta == 0 and not append else "updated")
        )
        if as_json:
            emit(
                {
                    "status": verb,
                    "created": response.created,
                    "bytes_delta": response.bytes_delta,
                    **document_record(doc),
                    # For SearchRequest.min_positions: a search that waits for this write.
                    "position": position_record(response.position),
                }
            )
            return
        # typer.echo, not rich: a write is an everyday command and rich costs its import.
        typer.echo(
            f"{verb} {doc.path} v{doc.version} {format_size(doc.size_bytes)} "
            f"({response.bytes_delta:+d} B) sha256 {doc.sha256[:12]}"
        )

    @app.command()
    def read(
        path: Annotated[str, typer.Argument(help="Document path.")],
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
        from engram.v1 import storage_pb2, storage_pb2_grpc

        request = storage_pb2.ReadDocumentRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto(),
            path=path,
            version=version,
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(lambda: stub.ReadDocument(request, metadata=metadata(token)))
        doc = response.document
        if as_json:
            emit(document_record(doc, content=True))
            return
        if meta:
            err_console.print(
                f"{doc.path} v{doc.version} {format_size(doc.size_bytes)} {doc.word_count} words "
                f"sha256 {doc.sha256} updated {timestamp(doc.updated_at)} by {doc.updated_by}",
                highlight=False,
            )
        typer.echo(doc.content, nl=not doc.content.endswith("\n"))

    @app.command()
    def ls(
        directory: Annotated[str, typer.Argument(help="Directory ('' = root).")] = "",
        recursive: Annotated[
            bool,
            typer.Option(
                "--recursive/--no-recursive",
                "-r/-R",
                help="The whole subtree, or only the directory's own entries.",
            ),
        ] = True,
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
        from engram.v1 import storage_pb2, storage_pb2_grpc

        space = _space(visibility, name, project, bot, user, tenant)
        directory = directory.strip("/")
        entries: list[storage_pb2.DirectoryEntry] = []
        page = ""
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            while True:
                request = storage_pb2.ListDocumentsRequest(
                    space=space.to_proto(),
                    dir=directory,
                    recursive=recursive,
                    page_size=1000,
                    page_token=page,
                )
                response = call(partial(stub.ListDocuments, request, metadata=metadata(token)))
                entries.extend(response.entries)
                page = response.next_page_token
                if not page:
                    break
        count = sum(0 if entry.is_dir else 1 for entry in entries)
        if as_json:
            emit(
                {
                    "space": space.label,
                    "dir": directory,
                    "recursive": recursive,
                    "documents": count,
                    "entries": [
                        {
                            "path": entry.path,
                            "is_dir": entry.is_dir,
                            "size_bytes": entry.size_bytes,
                            "updated_at": timestamp(entry.updated_at),
                        }
                        for entry in entries
                    ],
                }
            )
            return
        # Drawn here rather than with rich's Tree: importing rich costs more CPU than the
        # whole listing (issue 17's start-up budget).
        label = space.label + (f"/{directory}" if directory else "")
        for line in tree_lines(label, directory, entries):
            typer.echo(line)
        typer.echo(f"{count} document(s)")

    @app.command()
    def rm(
        path: Annotated[str, typer.Argument(help="Document path.")],
        if_sha: Annotated[
            str, typer.Option("--if-sha", help="Only if the current sha256 is this.")
        ] = "",
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
        from engram.v1 import storage_pb2, storage_pb2_grpc

        request = storage_pb2.DeleteDocumentRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto(),
            path=path,
            expected_sha256=if_sha,
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(lambda: stub.DeleteDocument(request, metadata=metadata(token)))
        if as_json:
            emit(
                {
                    "path": path,
                    "deleted": True,
                    "deleted_bytes": response.deleted_bytes,
                    "position": position_record(response.position),
                }
            )
            return
        typer.echo(f"deleted {path} ({format_size(response.deleted_bytes)})")

    @app.command()
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

        from engram.v1 import storage_pb2, storage_pb2_grpc

        space = _space(visibility, name, project, bot, user, tenant)
        request = storage_pb2.GetUsageRequest(space=space.to_proto())
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            usage = call(lambda: stub.GetUsage(request, metadata=metadata(token)))
        if as_json:
            emit(
                {
                    "space": space.label,
                    "used_bytes": usage.used_bytes,
                    "quota_bytes": usage.quota_bytes,
                    "document_count": usage.document_count,
                    "tenant_used_bytes": usage.tenant_used_bytes,
                    "tenant_quota_bytes": usage.tenant_quota_bytes,
                }
            )
            return
        table = Table("scope", "used", "limit", "documents", title=space.label)
        table.add_row(
            "space",
            format_size(usage.used_bytes),
            format_size(usage.quota_bytes) if usage.quota_bytes else "none",
            str(usage.document_count),
        )
        table.add_row(
            "tenant",
            format_size(usage.tenant_used_bytes),
            format_size(usage.tenant_quota_bytes),
            "",
        )
        console.print(table)

    @app.command("export")
    def export_space(
        out: Annotated[
            str, typer.Option("--out", "-o", help="Where to write the .tar.gz ('-' = stdout).")
        ],
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
        """Export the space as a .tar.gz, to a file or to stdout (--out -)."""
        from engram.v1 import storage_pb2, storage_pb2_grpc

        to_stdout = out == "-"
        if to_stdout and as_json:
            fail("--json prints a summary on stdout; it cannot go with --out -")
        space = _space(visibility, name, project, bot, user, tenant)
        request = storage_pb2.ExportSpaceRequest(space=space.to_proto())
        target = Path(out)
        staging = target.with_name(target.name + ".partial")
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)

            def download(handle: BinaryIO) -> int:
                written = 0
                with transfer_progress(f"exporting {space.label}", total=None) as advance:
                    for chunk in stub.ExportSpace(request, metadata=metadata(token)):
                        handle.write(chunk.data)
                        written += len(chunk.data)
                        advance(len(chunk.data))
                return written

            if to_stdout:
                size = call(lambda: download(sys.stdout.buffer))
                sys.stdout.buffer.flush()
                err_console.print(f"exported {space.label} ({format_size(size)})", highlight=False)
                return
            try:
                with staging.open("wb") as handle:
                    size = call(lambda: download(handle))
            except typer.Exit:
                staging.unlink(missing_ok=True)
                raise
        staging.replace(target)
        if as_json:
            emit({"space": space.label, "out": str(target), "bytes": size})
            return
        console.print(f"exported to [bold]{target}[/] ({format_size(size)})", highlight=False)

    @app.command("import")
    def import_space(
        archive: Annotated[
            str, typer.Option("--in", "-i", help="A .tar.gz of Markdown files ('-' = stdin).")
        ],
        strategy: Annotated[str, typer.Option("--strategy", help="skip|overwrite|rename")] = "skip",
        skip_unsupported: Annotated[
            bool,
            typer.Option(
                "--skip-unsupported",
                help="Leave out (and list) non-Markdown files and links, and an OpenClaw "
                "workspace's BOOTSTRAP.md and HEARTBEAT.md, instead of refusing the archive.",
            ),
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
        """Import a .tar.gz into the space; a bad archive imports nothing. Every entry is
        counted once: created, overwritten, unchanged, renamed or skipped."""
        from engram.v1 import storage_pb2, storage_pb2_grpc

        if strategy not in STRATEGIES:
            fail(f"--strategy must be one of {', '.join(STRATEGIES)}")
        if archive == "-":
            data = sys.stdin.buffer.read()
        else:
            source = Path(archive)
            if not source.is_file():
                fail(f"no such file: {archive}")
            data = source.read_bytes()
        space = _space(visibility, name, project, bot, user, tenant)
        space_ref = space.to_proto()

        with (
            channel(addr) as opened,
            transfer_progress(f"importing into {space.label}", total=len(data)) as advance,
        ):
            stub = storage_pb2_grpc.StorageServiceStub(opened)

            def messages() -> Iterator[storage_pb2.ImportSpaceRequest]:
                yield storage_pb2.ImportSpaceRequest(
                    space=space_ref,
                    strategy=storage_pb2.ImportStrategy.ValueType(STRATEGIES[strategy]),
                    skip_unsupported=skip_unsupported,
                )
                for start in range(0, len(data), IMPORT_CHUNK):
                    piece = data[start : start + IMPORT_CHUNK]
                    yield storage_pb2.ImportSpaceRequest(data=piece)
                    advance(len(piece))

            result = call(lambda: stub.ImportSpace(messages(), metadata=metadata(token)))
        counts = import_counts(result)
        if as_json:
            emit(
                {
                    "space": space.label,
                    **counts,
                    "entries_total": len(result.entries),
                    "bytes": result.bytes,
                    "entries": [
                        {
                            "path": entry.path,
                            "stored_path": entry.stored_path,
                            "outcome": outcome_name(entry.outcome),
                            "detail": entry.detail,
                        }
                        for entry in result.entries
                    ],
                }
            )
            return
        summary = ", ".join(f"{value} {key}" for key, value in counts.items())
        console.print(
            f"imported {len(result.entries)} entries into {space.label}: {summary}; "
            f"{format_size(result.bytes)} written",
            highlight=False,
        )
        for entry in result.entries:
            if entry.outcome == storage_pb2.IMPORT_OUTCOME_RENAMED:
                console.print(f"  {entry.path} -> {entry.stored_path}", highlight=False)
            elif entry.outcome == storage_pb2.IMPORT_OUTCOME_UNSUPPORTED:
                err_console.print(
                    f"left out {entry.path}: {entry.detail}",
                    style="yellow",
                    markup=False,
                    highlight=False,
                )

    @app.command()
    def history(
        path: Annotated[str, typer.Argument(help="Document path.")],
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

        from engram.v1 import storage_pb2, storage_pb2_grpc

        space = _space(visibility, name, project, bot, user, tenant)
        versions: list[Any] = []
        page = ""
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            while True:
                request = storage_pb2.ListDocumentVersionsRequest(
                    space=space.to_proto(), path=path, page_token=page
                )
                response = call(
                    partial(stub.ListDocumentVersions, request, metadata=metadata(token))
                )
                versions.extend(response.versions)
                page = response.next_page_token
                if not page:
                    break
        if as_json:
            emit(
                {
                    "space": space.label,
                    "path": path,
                    "versions": [
                        {
                            "version": item.version,
                            "sha256": item.sha256,
                            "size_bytes": item.size_bytes,
                            "updated_at": timestamp(item.updated_at),
                            "updated_by": item.updated_by,
                            "current": item.current,
                            "deleted": item.deleted,
                        }
                        for item in versions
                    ],
                }
            )
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


# ImportOutcome numbers of storage.proto and the names --json and the summary use.
OUTCOMES = {
    1: "created",
    2: "overwritten",
    3: "skipped",
    4: "renamed",
    5: "unchanged",
    6: "unsupported",
}


def outcome_name(outcome: int) -> str:
    return OUTCOMES.get(outcome, f"outcome_{outcome}")


def import_counts(result: Any) -> dict[str, int]:
    """Entries per outcome, every outcome named (zeros included), so they add up to the
    archive's entry count."""
    counts = dict.fromkeys(OUTCOMES.values(), 0)
    for entry in result.entries:
        name = outcome_name(entry.outcome)
        counts[name] = counts.get(name, 0) + 1
    return counts
