"""Client commands for StorageService: write, read, ls, rm, du, export, import, history."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.tree import Tree

from engram.cli.client import (
    AddrOption,
    BotOption,
    NameOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    call,
    channel,
    console,
    err_console,
    fail,
    metadata,
    read_input,
)
from engram.runtime.sizes import format_size
from engram.v1 import storage_pb2, storage_pb2_grpc

IMPORT_CHUNK = 256 * 1024
STRATEGIES = {
    "skip": storage_pb2.IMPORT_STRATEGY_SKIP,
    "overwrite": storage_pb2.IMPORT_STRATEGY_OVERWRITE,
    "rename": storage_pb2.IMPORT_STRATEGY_RENAME,
}


def _space(
    visibility: str, name: str, project: str, bot: str, user: str, tenant: str
) -> SpaceFlags:
    return SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )


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
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Write a document from a file or stdin."""
        content = read_input(file)
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
        console.print(
            f"{verb} [bold]{doc.path}[/] v{doc.version} {format_size(doc.size_bytes)} "
            f"({response.bytes_delta:+d} B) sha256 {doc.sha256[:12]}",
            highlight=False,
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
    ) -> None:
        """Print a document (or one of its kept versions) to stdout."""
        request = storage_pb2.ReadDocumentRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto(),
            path=path,
            version=version,
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(lambda: stub.ReadDocument(request, metadata=metadata(token)))
        doc = response.document
        if meta:
            err_console.print(
                f"{doc.path} v{doc.version} {format_size(doc.size_bytes)} {doc.word_count} words "
                f"sha256 {doc.sha256} updated {doc.updated_at.ToDatetime().isoformat()}Z "
                f"by {doc.updated_by}",
                highlight=False,
            )
        typer.echo(doc.content, nl=not doc.content.endswith("\n"))

    @app.command()
    def ls(
        directory: Annotated[str, typer.Argument(help="Directory ('' = root).")] = "",
        recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Whole subtree.")] = True,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Show a space (or a directory of it) as a tree."""
        space = _space(visibility, name, project, bot, user, tenant)
        root = Tree(
            f"[bold]{space.visibility}:{space.name}[/]" + (f"/{directory}" if directory else "")
        )
        nodes: dict[str, Tree] = {directory: root}
        count = 0
        token_page = ""
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            while True:
                request = storage_pb2.ListDocumentsRequest(
                    space=space.to_proto(),
                    dir=directory,
                    recursive=recursive,
                    page_size=1000,
                    page_token=token_page,
                )
                response = call(partial(stub.ListDocuments, request, metadata=metadata(token)))
                for entry in response.entries:
                    count += 0 if entry.is_dir else 1
                    parent = nodes[directory]
                    relative = entry.path[len(directory) + 1 if directory else 0 :]
                    parts = relative.split("/")
                    prefix = directory
                    for part in parts[:-1]:
                        prefix = f"{prefix}/{part}" if prefix else part
                        if prefix not in nodes:
                            nodes[prefix] = parent.add(f"[bold blue]{part}/[/]")
                        parent = nodes[prefix]
                    if entry.is_dir:
                        nodes.setdefault(entry.path, parent.add(f"[bold blue]{parts[-1]}/[/]"))
                    else:
                        parent.add(f"{parts[-1]} [dim]{format_size(entry.size_bytes)}[/]")
                token_page = response.next_page_token
                if not token_page:
                    break
        console.print(root)
        console.print(f"[dim]{count} document(s)[/]")

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
    ) -> None:
        """Delete a document (its content stays readable through `history`)."""
        request = storage_pb2.DeleteDocumentRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto(),
            path=path,
            expected_sha256=if_sha,
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(lambda: stub.DeleteDocument(request, metadata=metadata(token)))
        console.print(
            f"deleted [bold]{path}[/] ({format_size(response.deleted_bytes)})", highlight=False
        )

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
    ) -> None:
        """Show the space's usage and its tenant's."""
        request = storage_pb2.GetUsageRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto()
        )
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            usage = call(lambda: stub.GetUsage(request, metadata=metadata(token)))
        table = Table("scope", "used", "limit", "documents")
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
        out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the .tar.gz.")],
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Export the space as a .tar.gz."""
        request = storage_pb2.ExportSpaceRequest(
            space=_space(visibility, name, project, bot, user, tenant).to_proto()
        )
        partial = out.with_name(out.name + ".partial")
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)

            def download() -> int:
                written = 0
                with partial.open("wb") as handle:
                    for chunk in stub.ExportSpace(request, metadata=metadata(token)):
                        handle.write(chunk.data)
                        written += len(chunk.data)
                return written

            try:
                size = call(download)
            except typer.Exit:
                partial.unlink(missing_ok=True)
                raise
        partial.replace(out)
        console.print(f"exported to [bold]{out}[/] ({format_size(size)})", highlight=False)

    @app.command("import")
    def import_space(
        archive: Annotated[Path, typer.Option("--in", "-i", help="A .tar.gz of Markdown files.")],
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
    ) -> None:
        """Import a .tar.gz into the space; a bad archive imports nothing."""
        if strategy not in STRATEGIES:
            fail(f"--strategy must be one of {', '.join(STRATEGIES)}")
        if not archive.is_file():
            fail(f"no such file: {archive}")
        data = archive.read_bytes()
        space = _space(visibility, name, project, bot, user, tenant).to_proto()

        def messages() -> Iterator[storage_pb2.ImportSpaceRequest]:
            yield storage_pb2.ImportSpaceRequest(
                space=space, strategy=STRATEGIES[strategy], skip_unsupported=skip_unsupported
            )
            for start in range(0, len(data), IMPORT_CHUNK):
                yield storage_pb2.ImportSpaceRequest(data=data[start : start + IMPORT_CHUNK])

        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            result = call(lambda: stub.ImportSpace(messages(), metadata=metadata(token)))
        console.print(
            f"imported: {result.written} written, {result.renamed} renamed, "
            f"{result.skipped} skipped, {format_size(result.bytes)}"
            + (f", {result.unsupported} unsupported left out" if result.unsupported else ""),
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
    ) -> None:
        """List a document's kept versions (restore one with read --version N | write)."""
        space = _space(visibility, name, project, bot, user, tenant).to_proto()
        table = Table("version", "sha256", "size", "written", "by", "")
        page = ""
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            while True:
                request = storage_pb2.ListDocumentVersionsRequest(
                    space=space, path=path, page_token=page
                )
                response = call(
                    partial(stub.ListDocumentVersions, request, metadata=metadata(token))
                )
                for item in response.versions:
                    note = "current" if item.current else ("deleted" if item.deleted else "")
                    table.add_row(
                        str(item.version),
                        item.sha256[:12],
                        format_size(item.size_bytes),
                        item.updated_at.ToDatetime().isoformat(timespec="seconds") + "Z",
                        item.updated_by,
                        note,
                    )
                page = response.next_page_token
                if not page:
                    break
        console.print(table)
