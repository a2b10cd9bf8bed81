"""Client commands for IndexerService: reindex, index-status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from engram.cli.client import (
    AddrOption,
    BotOption,
    JsonOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    call,
    channel,
    console,
    emit,
    fail,
    metadata,
)

if TYPE_CHECKING:
    from engram.v1 import space_pb2


def space_refs(
    names: list[str], visibility: str, project: str, bot: str, user: str, tenant: str
) -> list[space_pb2.SpaceRef]:
    """`--space` values: a space name (qualified by the other flags) or a whole space id
    (`v1:<visibility>:<tenant>:<project>:<bot>:<user>:<name>`)."""
    from engram.domain.errors import InvalidSpaceRef
    from engram.domain.spaces import parse_space_id
    from engram.wire import space_to_proto

    refs = []
    for name in names:
        if name.startswith("v1:"):
            try:
                refs.append(space_to_proto(parse_space_id(name)))
            except InvalidSpaceRef as error:
                fail(f"--space {name!r}: {error.message}")
            continue
        flags = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        )
        refs.append(flags.to_proto())
    return refs


def register(app: typer.Typer) -> None:
    @app.command()
    def reindex(
        space: Annotated[
            list[str] | None,
            typer.Option(
                "--space",
                "-s",
                help="A space name (with -v and the qualifiers) or a space id; repeatable.",
                show_default=False,
            ),
        ] = None,
        all_spaces: Annotated[
            bool, typer.Option("--all", help="Every space of every tenant (platform admin).")
        ] = False,
        visibility: VisibilityOption = "private",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
        as_json: JsonOption = False,
    ) -> None:
        """Queue documents for indexing again (after a failure, or to rebuild the indexes)."""
        from engram.v1 import indexer_pb2, indexer_pb2_grpc

        names = space or []
        if all_spaces == bool(names):
            fail("name spaces with --space, or use --all (not both)")
        request = indexer_pb2.ReindexRequest(
            spaces=space_refs(names, visibility, project, bot, user, tenant), all=all_spaces
        )
        with channel(addr) as opened:
            stub = indexer_pb2_grpc.IndexerServiceStub(opened)
            response = call(lambda: stub.Reindex(request, metadata=metadata(token)))
        if as_json:
            emit({"documents_enqueued": response.documents_enqueued})
            return
        console.print(
            f"queued [bold]{response.documents_enqueued}[/] documents for indexing",
            highlight=False,
        )

    @app.command("index-status")
    def index_status(
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
        as_json: JsonOption = False,
    ) -> None:
        """Show the active embedding model, a switch under way, and the indexing backlog."""
        from engram.v1 import indexer_pb2, indexer_pb2_grpc

        with channel(addr) as opened:
            stub = indexer_pb2_grpc.IndexerServiceStub(opened)
            status = call(
                lambda: stub.GetIndexStatus(
                    indexer_pb2.GetIndexStatusRequest(), metadata=metadata(token)
                )
            )
        if as_json:
            emit(
                {
                    "active_model": status.active_model,
                    "dimension": status.dimension,
                    "pending_model": status.pending_model,
                    "switch_documents_indexed": status.switch_documents_indexed,
                    "backlog": status.backlog,
                    "collections": list(status.collections),
                }
            )
            return
        active = f"{status.active_model} ({status.dimension} dims)" if status.active_model else "-"
        console.print(f"active model   {active}", highlight=False)
        if status.pending_model:
            console.print(
                f"switching to   {status.pending_model} "
                f"({status.switch_documents_indexed} documents copied so far)",
                highlight=False,
            )
        console.print(f"backlog        {status.backlog} events", highlight=False)
        console.print(f"collections    {', '.join(status.collections) or '-'}", highlight=False)
