"""Client commands for erasing and administering spaces: purge, spaces, spaces delete."""

from functools import partial
from typing import Annotated, Any

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
    fail,
    format_size,
    metadata,
    timestamp,
    typer_app,
)

spaces_app = typer_app(
    help="List a tenant's spaces (the default) or delete one for good.",
    invoke_without_command=True,
)


@spaces_app.callback()
def spaces_list(
    ctx: typer.Context,
    tenant: Annotated[
        str, typer.Option("--tenant", help="Another tenant's spaces (platform admins).")
    ] = "",
    global_: Annotated[bool, typer.Option("--global", help="The global spaces.")] = False,
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """List the spaces that hold documents: id, documents, size, last write."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from engram.v1 import storage_pb2, storage_pb2_grpc

    summaries: list[Any] = []
    page = ""
    with channel(addr) as opened:
        stub = storage_pb2_grpc.StorageServiceStub(opened)
        while True:
            request = storage_pb2.ListSpacesRequest(
                tenant=tenant, page_size=1000, page_token=page, **{"global": global_}
            )
            response = call(partial(stub.ListSpaces, request, metadata=metadata(token)))
            summaries.extend(response.spaces)
            page = response.next_page_token
            if not page:
                break
    if as_json:
        emit(
            {
                "spaces": [
                    {
                        "space_id": summary.space_id,
                        "document_count": summary.document_count,
                        "used_bytes": summary.used_bytes,
                        "last_write_at": timestamp(summary.last_write_at),
                    }
                    for summary in summaries
                ]
            }
        )
        return
    table = Table("space id", "documents", "size", "last write (UTC)")
    for summary in summaries:
        table.add_row(
            summary.space_id,
            str(summary.document_count),
            format_size(summary.used_bytes),
            compact_time(summary.last_write_at),
        )
    console.print(table)


@spaces_app.command("delete")
def spaces_delete(
    confirm: Annotated[
        str,
        typer.Option("--confirm", help="The space's id, as `engram spaces` lists it, to confirm."),
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
    """Erase a whole space for good: every document, every kept version, every chunk."""
    from engram.v1 import storage_pb2, storage_pb2_grpc

    flags = SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )
    request = storage_pb2.DeleteSpaceRequest(space=flags.to_proto(), confirm_space_id=confirm)
    with channel(addr) as opened:
        stub = storage_pb2_grpc.StorageServiceStub(opened)
        response = call(partial(stub.DeleteSpace, request, metadata=metadata(token)))
    if as_json:
        emit(
            {
                "space_id": response.space_id,
                "documents_erased": response.documents_erased,
                "versions_erased": response.versions_erased,
                "refunded_bytes": response.refunded_bytes,
            }
        )
        return
    console.print(
        f"deleted [bold]{response.space_id}[/]: {response.documents_erased} document(s), "
        f"{response.versions_erased} kept version(s), {format_size(response.refunded_bytes)} "
        "given back",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(spaces_app, name="spaces")

    @app.command()
    def purge(
        path: Annotated[str, typer.Argument(help="Document path.")],
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Erase without asking.")] = False,
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
        """Erase a document for good, with every kept version (tenant admins)."""
        from engram.v1 import storage_pb2, storage_pb2_grpc

        if not yes and not typer.confirm(
            f"Erase {path} and every kept version of it for good?", default=False
        ):
            fail("nothing erased (pass --yes to erase without asking)")
        flags = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        )
        request = storage_pb2.PurgeDocumentRequest(space=flags.to_proto(), path=path)
        with channel(addr) as opened:
            stub = storage_pb2_grpc.StorageServiceStub(opened)
            response = call(partial(stub.PurgeDocument, request, metadata=metadata(token)))
        if as_json:
            emit(
                {
                    "path": path,
                    "purged": response.purged,
                    "versions_erased": response.versions_erased,
                    "refunded_bytes": response.refunded_bytes,
                }
            )
            return
        if not response.purged:
            console.print(f"nothing stored at {path}; nothing erased", highlight=False)
            return
        console.print(
            f"purged [bold]{path}[/]: the document and {response.versions_erased} kept "
            f"version(s), {format_size(response.refunded_bytes)} given back",
            highlight=False,
        )
