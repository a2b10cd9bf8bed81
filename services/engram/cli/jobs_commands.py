"""Client commands for MaintenanceService: `engram jobs` (runs), `jobs run`, `jobs settings`."""

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
    channel,
    console,
    emit,
    fail,
    metadata,
    timestamp,
    typer_app,
)
from engram.cli.indexer_commands import space_refs

if TYPE_CHECKING:
    import grpc

    from engram.v1 import maintenance_pb2, maintenance_pb2_grpc

# JobOutcome and LogRetention numbers of maintenance.proto.
OUTCOMES = {1: "running", 2: "succeeded", 3: "failed"}
FAILED = 3
RETENTIONS = {"off": 1, "archive": 2, "delete": 3}
RETENTION_NAMES = {value: name for name, value in RETENTIONS.items()}
# Runs fetched per call while listing.
PAGE = 200

jobs = typer_app(
    name="jobs",
    help="Maintenance job runs; `jobs run JOB` runs one now, `jobs settings` a space's settings.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _stub(opened: "grpc.Channel") -> "maintenance_pb2_grpc.MaintenanceServiceStub":
    from engram.v1 import maintenance_pb2_grpc

    return maintenance_pb2_grpc.MaintenanceServiceStub(opened)


def _duration(run: "maintenance_pb2.JobRun") -> str:
    if not run.HasField("finished_at"):
        return "-"
    seconds = run.finished_at.ToNanoseconds() / 1e9 - run.started_at.ToNanoseconds() / 1e9
    return f"{seconds:.1f}s"


def _counts(run: "maintenance_pb2.JobRun") -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(run.counts.items()))


def run_record(run: "maintenance_pb2.JobRun") -> dict[str, Any]:
    """A job run's `--json` fields."""
    return {
        "run_id": run.run_id,
        "job": run.job,
        "space_id": run.space_id,
        "outcome": OUTCOMES.get(run.outcome, "unspecified"),
        "on_demand": run.on_demand,
        "started_at": timestamp(run.started_at),
        "finished_at": timestamp(run.finished_at),
        "counts": dict(run.counts),
        "message": run.message,
        "details": list(run.details),
    }


def print_run(run: "maintenance_pb2.JobRun") -> None:
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
    as_json: JsonOption = False,
) -> None:
    """List maintenance job runs, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    from engram.v1 import maintenance_pb2

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
    if as_json:
        emit({"runs": [run_record(run) for run in runs]})
        return
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
    as_json: JsonOption = False,
) -> None:
    """Run one job on one space now (tenant admin) and print what it did."""
    from engram.v1 import maintenance_pb2

    request = maintenance_pb2.RunJobRequest(
        job=job,
        space=SpaceFlags(visibility, name, project, bot, user, tenant).to_proto(),
    )
    with channel(addr) as opened:
        stub = _stub(opened)
        response = call(lambda: stub.RunJob(request, metadata=metadata(token)))
    if as_json:
        emit(run_record(response.run))
    else:
        print_run(response.run)
    if response.run.outcome == FAILED:
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
    from engram.v1 import maintenance_pb2

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
                current.log_retention = maintenance_pb2.LogRetention.ValueType(
                    RETENTIONS[log_retention]
                )
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
    if as_json:
        emit(
            {
                "dream_enabled": current.dream_enabled,
                "log_retention": RETENTION_NAMES.get(current.log_retention, "off"),
                "log_retention_days": current.log_retention_days,
                "max_daily_logs": current.max_daily_logs,
                "stale_after_days": current.stale_after_days,
            }
        )
        return
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
