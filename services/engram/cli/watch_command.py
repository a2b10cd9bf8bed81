"""`engram watch`: print a space's changes as they happen (WatchSpace), resuming by itself."""

import json
from datetime import UTC
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    engram_client,
    err_console,
    jsonable,
)

if TYPE_CHECKING:
    from engram.client import SpaceChange
    from engram.domain.errors import EngramError


def change_record(change: "SpaceChange") -> dict[str, Any]:
    """One `--json` line."""
    record: dict[str, Any] = jsonable(change)
    # To the microsecond, as the server stamped it.
    at = change.at.astimezone(UTC).replace(tzinfo=None) if change.at else None
    record["at"] = at.isoformat() + "Z" if at else ""
    return record


def change_line(change: "SpaceChange") -> str:
    record = change_record(change)
    target = record["path"] or "(the whole space)"
    return (
        f"{record['at']}  {record['kind']:<13} {target}  v{record['version']}  "
        f"{record['size_bytes']} B  cursor={record['cursor']}"
    )


def _say_resuming(error: "EngramError") -> None:
    err_console.print(f"[yellow]{error.message}; resuming from the last cursor[/]", highlight=False)


def _follow(space: SpaceFlags, addr: str, token: str, options: dict[str, Any]) -> None:
    """Prints changes until `count` of them (0: until interrupted); remembers the cursor."""
    seen = 0
    with engram_client(addr, token, space.to_space()) as client:
        events = client.watch_space(
            cursor=options["cursor"], from_start=options["from_start"], on_resume=_say_resuming
        )
        for event in events:
            if event.change is None:
                if not options["as_json"]:
                    err_console.print("[dim]caught up; watching for changes[/]")
                continue
            options["cursor"] = event.change.cursor
            seen += 1
            record = change_record(event.change)
            typer.echo(json.dumps(record) if options["as_json"] else change_line(event.change))
            if options["count"] and seen >= options["count"]:
                events.close()
                return


def register(app: typer.Typer) -> None:
    @app.command()
    def watch(
        cursor: Annotated[
            str, typer.Option("--cursor", help="Resume after this change's cursor.")
        ] = "",
        from_start: Annotated[
            bool, typer.Option("--from-start", help="Replay every retained change first.")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="One JSON object per change, per line.")
        ] = False,
        count: Annotated[
            int, typer.Option("--count", min=0, help="Stop after this many changes (0: never).")
        ] = 0,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Print the space's changes as they happen (written, deleted, purged). Resumes by
        itself from the last cursor when the server goes away; Ctrl-C prints that cursor."""
        space = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        )
        options: dict[str, Any] = {
            "cursor": cursor,
            "from_start": from_start,
            "as_json": as_json,
            "count": count,
        }
        try:
            call(lambda: _follow(space, addr, token, options))
        except KeyboardInterrupt:
            if options["cursor"]:
                err_console.print(f"stopped; resume with --cursor {options['cursor']}")
