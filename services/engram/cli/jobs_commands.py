"""Client commands for MaintenanceService: `engram jobs` (runs), `jobs run`, `jobs settings`."""

from __future__ import annotations

from typing import Annotated

import grpc
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
    channel,
    console,
    fail,
    metadata,
)
from engram.cli.indexer_commands import space_refs
from engram.v1 import maintenance_pb2, maintenance_pb2_grpc

OUTCOMES = {
    maintenance_pb2.JOB_OUTCOME_RUNNING: "running",
    maintenance_pb2.JOB_OUTCOME_SUCCEEDED: "succeeded",
    maintenance_pb2.JOB_OUTCOME_FAILED: "failed",
}
RETENTIONS = {
    "off": maintenance_pb2.LOG_RETENTION_OFF,
    "archive": maintenance_pb2.LOG_RETENTION_ARCHIVE,
    "delete": maintenance_pb2.LOG_RETENTION_DELETE,
}
RETENTION_NAMES = {value: name for name, value in RETENTIONS.items()}
# Runs fetched per call while listing.
PAGE = 200

jobs = typer.Typer(
    name="jobs",
    help="Maintenance job runs; `jobs run JOB` runs one now, `jobs settings` a space's settings.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _stub(opened: grpc.Channel) -> maintenance_pb2_grpc.MaintenanceServiceStub:
    return maintenance_pb2_grpc.MaintenanceServiceStub(opened)


def _duration(run: maintenance_pb2.JobRun) -> str:
    if not run.HasField("finished_at"):
        return "-"
    seconds = run.finished_at.ToNanoseconds() / 1e9 - run.started_at.ToNanoseconds() / 1e9
    return f"{seconds:.1f}s"


def _counts(run: maintenance_pb2.JobRun) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(run.counts.items()))


def print_run(run: maintenance_pb2.JobRun) -> None:
    outcome = OUTCOMES.get(run.outcome, "?")
    colour = {"succeeded": "green", "failed": "red"}.get(outcome, "yellow")
    console.print(
        f"[bold]{run.job}[/] on {run.space_id}: [{colour}]{outcome}[/] in {_duration(run)}",
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
) -> None:
    """List maintenance job runs, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    request = maintenance_pb2.ListJobRunsRequest(job=job)
    if space is not None:
        (ref,) = space_refs([space], visibility, project, bot, user, tenant)
        request.space.CopyFrom(ref)
    runs: list[maintenance_pb2.JobRun] = []
    with channel(addr) as opened:
        stub = _stub(opened)
        while len(runs) < limit:
            request.page_size = min(PAGE, limit - len(runs))
            response = call(lambda: stub.ListJobRuns(request, metadata=metadata(token)))
            runs.extend(response.runs)
            if not response.next_page_token:
                break
            request.page_token = response.next_page_token
    if not runs:
        console.print("no job runs", highlight=False)
        return
    # One line per run (a table would wrap the space ids on a terminal).
    for run in runs:
        fields = [
            run.started_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S"),
            run.job + (" (on demand)" if run.on_demand else ""),
            OUTCOMES.get(run.outcome, "?"),
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
) -> None:
    """Run one job on one space now (tenant admin) and print what it did."""
    request = maintenance_pb2.RunJobRequest(
        job=job,
        space=SpaceFlags(visibility, name, project, bot, user, tenant).to_proto(),
    )
    with channel(addr) as opened:
        stub = _stub(opened)
        response = call(lambda: stub.RunJob(request, metadata=metadata(token)))
    print_run(response.run)
    if response.run.outcome == maintenance_pb2.JOB_OUTCOME_FAILED:
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
) -> None:
    """Show a space's maintenance settings; with any option, change them (tenant admin)."""
    space = SpaceFlags(visibility, name, project, bot, user, tenant).to_proto()
    if log_retention is not None and log_retention not in RETENTIONS:
        fail(f"--log-retention must be one of {', '.join(RETENTIONS)}")
    with channel(addr) as opened:
        stub = _stub(opened)
        current = call(
            lambda: stub.GetSpaceMaintenance(
                maintenance_pb2.GetSpaceMaintenanceRequest(space=space),
                metadata=metadata(token),
            )
        ).settings
        changes = (dream, log_retention, retention_days, max_daily_logs, stale_after_days)
        if any(change is not None for change in changes):
            if dream is not None:
                current.dream_enabled = dream
            if log_retention is not None:
                current.log_retention = RETENTIONS[log_retention]
            if retention_days is not None:
                current.log_retention_days = retention_days
            if max_daily_logs is not None:
                current.max_daily_logs = max_daily_logs
            if stale_after_days is not None:
                current.stale_after_days = stale_after_days
            request = maintenance_pb2.SetSpaceMaintenanceRequest(space=space, settings=current)
            current = call(
                lambda: stub.SetSpaceMaintenance(request, metadata=metadata(token))
            ).settings
    console.print(
        f"dream: {'on' if current.dream_enabled else 'off'}\n"
        f"log retention: {RETENTION_NAMES.get(current.log_retention, 'off')}"
        f" (days: {current.log_retention_days or 'no limit'},"
        f" max daily logs: {current.max_daily_logs})\n"
        f"stale after: {current.stale_after_days} days",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(jobs)
