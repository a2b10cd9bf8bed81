"""Client commands for MaintenanceService: `engram jobs` (runs), `jobs run`, `jobs settings`."""

from itertools import islice
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
    console,
    emit,
    engram_client,
    fail,
    jsonable,
    typer_app,
)
from engram.cli.indexer_commands import space_refs

if TYPE_CHECKING:
    from engram.client import JobRun, SpaceMaintenance

RETENTIONS = ("off", "archive", "delete")
# Runs fetched per call while listing.
PAGE = 200

jobs = typer_app(
    name="jobs",
    help="Maintenance job runs; `jobs run JOB` runs one now, `jobs settings` a space's settings.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _duration(run: "JobRun") -> str:
    if run.finished_at is None or run.started_at is None:
        return "-"
    return f"{(run.finished_at - run.started_at).total_seconds():.1f}s"


def _counts(run: "JobRun") -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(run.counts.items()))


def run_record(run: "JobRun") -> dict[str, Any]:
    """A job run's `--json` fields."""
    record: dict[str, Any] = jsonable(run)
    fields = ("run_id", "job", "space_id", "outcome", "on_demand", "started_at", "finished_at")
    return {
        **{name: record[name] or "" for name in fields},
        "on_demand": run.on_demand,
        "counts": dict(run.counts),
        "message": run.message,
        "details": list(run.details),
    }


def print_run(run: "JobRun") -> None:
    colour = {"succeeded": "green", "failed": "red"}.get(run.outcome, "yellow")
    console.print(
        f"[bold]{run.job}[/] on {run.space_id}: [{colour}]{run.outcome}[/] in {_duration(run)}",
        highlight=False,
    )
    if run.counts:
        console.print(f"  {_counts(run)}", highlight=False)
    if run.message:
        console.print(f"  {run.message}", highlight=False)
    for line in run.details:
        console.print(f"  - {line}", highlight=False)


@jobs.callback()
def list_runs(
    ctx: typer.Context,
    space: Annotated[
        str | None,
        typer.Option(
            "--space",
            "-s",
            help="A space name (with -v and the qualifiers) or a space id; "
            "unset = every space (platform admin).",
            show_default=False,
        ),
    ] = None,
    job: Annotated[str, typer.Option("--job", help="Only this job's runs.")] = "",
    limit: Annotated[int, typer.Option("--limit", help="Newest runs shown.", min=1)] = 50,
    visibility: VisibilityOption = "private",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """List maintenance job runs, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    ref = space_refs([space], visibility, project, bot, user, tenant)[0] if space else None
    with engram_client(addr, token) as client:
        found = client.iter_job_runs(
            job=job, all_spaces=ref is None, page_size=min(PAGE, limit), space=ref
        )
        runs: list[JobRun] = call(lambda: list(islice(found, limit)))
    if as_json:
        emit({"runs": [run_record(run) for run in runs]})
        return
    if not runs:
        console.print("no job runs", highlight=False)
        return
    # One line per run (a table would wrap the space ids on a terminal).
    for run in runs:
        fields = [
            run.started_at.strftime("%Y-%m-%d %H:%M:%S") if run.started_at else "-",
            run.job + (" (on demand)" if run.on_demand else ""),
            run.outcome,
            _duration(run),
            run.space_id,
            _counts(run),
            run.message,
        ]
        console.print("  ".join(field for field in fields if field), highlight=False)


@jobs.command("run")
def run_job(
    job: Annotated[str, typer.Argument(help="The job, e.g. dream or staleness_report.")],
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
    """Run one job on one space now (tenant admin) and print what it did."""
    space = SpaceFlags(visibility, name, project, bot, user, tenant).to_space()
    with engram_client(addr, token, space) as client:
        run = call(lambda: client.run_job(job))
    if as_json:
        emit(run_record(run))
    else:
        print_run(run)
    if run.outcome == "failed":
        raise typer.Exit(1)


@jobs.command("settings")
def settings(
    dream: Annotated[
        bool | None,
        typer.Option("--dream/--no-dream", help="Dreaming on this space.", show_default=False),
    ] = None,
    log_retention: Annotated[
        str | None,
        typer.Option("--log-retention", help="|".join(RETENTIONS), show_default=False),
    ] = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            "--retention-days",
            help="Daily logs older than this go the way of --log-retention (0 = no age limit).",
            show_default=False,
        ),
    ] = None,
    max_daily_logs: Annotated[
        int | None,
        typer.Option("--max-daily-logs", help="Daily logs kept (0 = 60).", show_default=False),
    ] = None,
    stale_after_days: Annotated[
        int | None,
        typer.Option(
            "--stale-after-days", help="Reported stale after (0 = 90).", show_default=False
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
    """Show a space's maintenance settings; with any option, change them (tenant admin)."""
    import dataclasses

    space = SpaceFlags(visibility, name, project, bot, user, tenant).to_space()
    if log_retention is not None and log_retention not in RETENTIONS:
        fail(f"--log-retention must be one of {', '.join(RETENTIONS)}")
    asked = {
        "dream_enabled": dream,
        "log_retention": log_retention,
        "log_retention_days": retention_days,
        "max_daily_logs": max_daily_logs,
        "stale_after_days": stale_after_days,
    }
    changes: dict[str, Any] = {field: value for field, value in asked.items() if value is not None}
    with engram_client(addr, token, space) as client:
        current = call(client.get_space_maintenance)
        if changes:
            wanted = dataclasses.replace(current, **changes)
            current = call(lambda: client.set_space_maintenance(wanted))
    if as_json:
        emit(jsonable(current))
        return
    print_settings(current)


def print_settings(current: "SpaceMaintenance") -> None:
    console.print(
        f"dream: {'on' if current.dream_enabled else 'off'}\n"
        f"log retention: {current.log_retention}"
        f" (days: {current.log_retention_days or 'no limit'},"
        f" max daily logs: {current.max_daily_logs})\n"
        f"stale after: {current.stale_after_days} days",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(jobs)
