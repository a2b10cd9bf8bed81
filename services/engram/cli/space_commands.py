"""Client commands for erasing and administering spaces: purge, spaces, spaces delete."""

from typing import Annotated

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
    fail,
    format_size,
    jsonable,
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

    with engram_client(addr, token) as client:
        found = client.iter_spaces(tenant=tenant, global_spaces=global_, page_size=1000)
        summaries = call(lambda: list(found))
    if as_json:
        fields = ("space_id", "document_count", "used_bytes", "last_write_at")
        records = [jsonable(summary) for summary in summaries]
        emit({"spaces": [{f: record[f] or "" for f in fields} for record in records]})
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
    flags = SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )
    with engram_client(addr, token, flags.to_space()) as client:
        response = call(lambda: client.delete_space(confirm_space_id=confirm))
    if as_json:
        emit(jsonable(response))
        return
    console.print(
        f"deleted [bold]{response.space_id}[/]: {response.documents_erased} document(s), "
        f"{response.versions_erased} kept version(s), {format_size(response.refunded_bytes)} "
        "given back",
        highlight=False,
    )


def where(
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    as_json: JsonOption = False,
) -> None:
    """Print the space a command would use here (a bot or project space without --project
    takes this directory's project key) and the server it would ask."""
    from engram.cli.project_key import current_project_key, workspace_root

    flags = SpaceFlags(
        visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
    )
    root = workspace_root()
    record = {
        "space": flags.label,
        "visibility": flags.visibility,
        "tenant": flags.tenant,
        "project": flags.project,
        "bot": flags.bot,
        "user": flags.user,
        "name": flags.name,
        "addr": addr,
        "workspace_root": str(root),
        "project_key": current_project_key(),
    }
    if as_json:
        emit(record)
        return
    for key, value in record.items():
        if value or key in ("space", "name", "visibility"):
            typer.echo(f"{key:<15} {value}")


def register(app: typer.Typer) -> None:
    app.add_typer(spaces_app, name="spaces")
    app.command()(where)

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
        if not yes and not typer.confirm(
            f"Erase {path} and every kept version of it for good?", default=False
        ):
            fail("nothing erased (pass --yes to erase without asking)")
        flags = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        )
        with engram_client(addr, token, flags.to_space()) as client:
            response = call(lambda: client.purge_document(path))
        if as_json:
            emit({"path": path, **jsonable(response)})
            return
        if not response.purged:
            console.print(f"nothing stored at {path}; nothing erased", highlight=False)
            return
        console.print(
            f"purged [bold]{path}[/]: the document and {response.versions_erased} kept "
            f"version(s), {format_size(response.refunded_bytes)} given back",
            highlight=False,
        )
