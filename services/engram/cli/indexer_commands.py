"""Client commands for IndexerService: reindex, index-status."""

import time
from typing import TYPE_CHECKING, Annotated, Any

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
    console,
    emit,
    engram_client,
    fail,
)

if TYPE_CHECKING:
    from engram.client import Client, IndexStatus, Space
    from engram.domain.spaces import SpaceRef


def space_refs(
    names: list[str], visibility: str, project: str, bot: str, user: str, tenant: str
) -> "list[Space | SpaceRef]":
    """`--space` values: a space name (qualified by the other flags) or a whole space id
    (`v1:<visibility>:<tenant>:<project>:<bot>:<user>:<name>`)."""
    from engram.domain.errors import InvalidSpaceRef
    from engram.domain.spaces import parse_space_id

    refs: list[Space | SpaceRef] = []
    for name in names:
        if name.startswith("v1:"):
            try:
                refs.append(parse_space_id(name))
            except InvalidSpaceRef as error:
                fail(f"--space {name!r}: {error.message}")
            continue
        flags = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        )
        refs.append(flags.to_space())
    return refs


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
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow the indexer's backlog (every space's) down to zero, with a "
            "progress bar, its rate and an ETA.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.0, help="Give up waiting after this many seconds."),
    ] = 600.0,
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Queue documents for indexing again (after a failure, or to rebuild the indexes)."""
    names = space or []
    if all_spaces == bool(names):
        fail("name spaces with --space, or use --all (not both)")
    spaces = space_refs(names, visibility, project, bot, user, tenant)
    with engram_client(addr, token) as client:
        enqueued = call(lambda: client.reindex(spaces, all=all_spaces))
        if not as_json:
            console.print(f"queued [bold]{enqueued}[/] documents for indexing", highlight=False)
        waited = follow_backlog(client, timeout) if wait else None
    if as_json:
        record: dict[str, Any] = {"documents_enqueued": enqueued}
        if waited is not None:
            record.update(waited)
        emit(record)
    if waited is not None and waited["backlog"] > 0:
        fail(
            f"the backlog is still {waited['backlog']} events after {timeout:g} s "
            "(see engram index-status)",
            code=1,
        )
    if waited is not None and not as_json:
        console.print(
            f"indexed: the backlog reached 0 in {waited['seconds']:.1f} s", highlight=False
        )


def index_status(
    sample: Annotated[
        float,
        typer.Option(
            "--sample",
            min=0.0,
            max=60.0,
            help="Seconds between two readings, for the indexing rate (0 = one reading, no rate).",
        ),
    ] = 1.0,
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Show the active embedding model, a switch under way, the indexing backlog (per
    event) and the rate it is indexed at."""
    with engram_client(addr, token) as client:

        def read() -> "IndexStatus":
            return call(client.index_status)

        first = read()
        started = time.monotonic()
        status = first
        rate: float | None = None
        if sample > 0:
            time.sleep(sample)
            status = read()
            elapsed = time.monotonic() - started
            rate = max(0, status.indexed_total - first.indexed_total) / elapsed
    if as_json:
        emit(
            {
                "active_model": status.active_model,
                "dimension": status.dimension,
                "pending_model": status.pending_model,
                "switch_documents_indexed": status.switch_documents_indexed,
                "backlog": status.backlog,
                "indexed_total": status.indexed_total,
                "rate_per_second": rate,
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
    if rate is not None:
        eta = f", about {status.backlog / rate:.0f} s to go" if rate and status.backlog else ""
        console.print(f"indexing       {rate:.1f} events/s over {sample:g} s{eta}", highlight=False)
    console.print(f"collections    {', '.join(status.collections) or '-'}", highlight=False)


# Seconds between backlog readings while `reindex --wait` follows it.


def register(app: typer.Typer) -> None:
    app.command()(reindex)
    app.command("index-status")(index_status)


POLL_SECONDS = 0.5


def follow_backlog(client: "Client", timeout: float) -> dict[str, Any]:
    """Reads the backlog every POLL_SECONDS until it is 0 or `timeout` passes, drawing a bar
    (done = the largest backlog seen minus the current one) with rate and ETA. Returns the
    last backlog and the seconds waited."""
    from engram.cli.progress import count_progress

    def backlog() -> int:
        return call(client.index_status).backlog

    started = time.monotonic()
    remaining = backlog()
    largest = remaining
    with count_progress("indexing", total=max(largest, 1)) as update:
        update(0)
        while remaining > 0 and time.monotonic() - started < timeout:
            time.sleep(POLL_SECONDS)
            remaining = backlog()
            largest = max(largest, remaining)
            update(largest - remaining, total=largest)
        if remaining == 0:
            update(max(largest, 1), total=max(largest, 1))
    return {"backlog": remaining, "seconds": round(time.monotonic() - started, 3)}
