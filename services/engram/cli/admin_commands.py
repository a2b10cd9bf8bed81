"""Client commands for identity and quotas: token create|list|revoke, quota
show|set|reconcile, audit."""

from datetime import UTC, datetime
from itertools import islice
from typing import Annotated, Any

import typer

from engram.cli.client import (
    AddrOption,
    JsonOption,
    TokenOption,
    call,
    compact_time,
    console,
    emit,
    engram_client,
    fail,
    format_size,
    jsonable,
    parse_size,
    space_label,
    typer_app,
)

ROLES = ("viewer", "config_editor", "member", "admin")


def record(value: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """A client result's `--json` fields, unset times as ""."""
    found: dict[str, Any] = jsonable(value)
    return {name: "" if found[name] is None else found[name] for name in fields}


token_app = typer_app(help="Personal access tokens.", no_args_is_help=True)
quota_app = typer_app(help="Tenant quotas and usage.", no_args_is_help=True)


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option("--role", help="|".join(ROLES))] = "member",
    user: Annotated[str, typer.Option("--user", help="The token's user (default: you).")] = "",
    days: Annotated[int, typer.Option("--days", help="Lifetime in days (0 = 90).")] = 0,
    description: Annotated[str, typer.Option("--description", "-d")] = "",
    tenant: Annotated[str, typer.Option("--tenant", help="Platform admins only.")] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Create a personal access token (tenant admins). It is shown once."""
    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)}")
    with engram_client(addr, token) as client:
        created = call(
            lambda: client.create_token(
                user=user,
                role=role,
                ttl_seconds=days * 86400,
                description=description,
                tenant=tenant,
            )
        )
    if as_json:
        emit(record(created, ("token_id", "token", "expires_at")))
        return
    expires = created.expires_at.date().isoformat() if created.expires_at else "-"
    console.print(f"token id [bold]{created.token_id}[/], expires {expires}", highlight=False)
    console.print("store it now; it is not shown again:", style="dim")
    typer.echo(created.token)


@token_app.command("list")
def token_list(
    user: Annotated[str, typer.Option("--user", help="Only this user's tokens.")] = "",
    tenant: Annotated[str, typer.Option("--tenant", help="Platform admins only.")] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """List the tenant's personal access tokens (tenant admins); never their secrets."""
    from rich import box
    from rich.table import Table

    with engram_client(addr, token) as client:
        found = client.iter_tokens(tenant=tenant, user=user, page_size=1000)
        tokens = call(lambda: list(found))
    epoch = datetime.fromtimestamp(0, UTC)
    tokens.sort(key=lambda info: (info.created_at or epoch, info.token_id))
    if as_json:
        fields = (
            "token_id",
            "tenant",
            "user",
            "role",
            "description",
            "created_at",
            "expires_at",
            "created_by",
            "revoked",
            "revoked_at",
        )
        emit({"tokens": [record(info, fields) for info in tokens]})
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("user", overflow="fold")
    table.add_column("role", no_wrap=True)
    table.add_column("expires", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("description", overflow="fold")
    now = datetime.now(UTC)
    for info in tokens:
        expired = info.expires_at is not None and info.expires_at < now
        state = "revoked" if info.revoked else ("expired" if expired else "active")
        table.add_row(
            info.token_id,
            info.user,
            info.role or "?",
            compact_time(info.expires_at)[:10],
            state,
            info.description,
        )
    console.print(table)
    console.print(f"[dim]{len(tokens)} token(s)[/]", highlight=False)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The id `token create` printed.")],
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Revoke a personal access token."""
    with engram_client(addr, token) as client:
        call(lambda: client.revoke_token(token_id))
    if as_json:
        emit({"token_id": token_id, "revoked": True})
        return
    console.print(f"revoked {token_id}", highlight=False)


@quota_app.command("show")
def quota_show(
    tenant: Annotated[
        str, typer.Option("--tenant", help="Default: yours; 'instance' = global spaces.")
    ] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Show a tenant's usage and limit."""
    from rich.table import Table

    with engram_client(addr, token) as client:
        usage = call(lambda: client.quota_usage(tenant=tenant))
    source = "override" if usage.tenant_quota_overridden else "default"
    if as_json:
        emit(
            {
                "tenant": usage.tenant,
                "used_bytes": usage.tenant_used_bytes,
                "quota_bytes": usage.tenant_quota_bytes,
                "source": source,
            }
        )
        return
    table = Table("tenant", "used", "limit", "source")
    table.add_row(
        usage.tenant,
        format_size(usage.tenant_used_bytes),
        format_size(usage.tenant_quota_bytes),
        source,
    )
    console.print(table)


@quota_app.command("set")
def quota_set(
    tenant: Annotated[str, typer.Argument(help="Tenant id, or 'instance' for global spaces.")],
    size: Annotated[
        str, typer.Argument(help="Limit: bytes, or 500MB, 512MiB, 2GB, 2GiB ... (0 = no growth).")
    ],
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Set a tenant's aggregate limit (platform admins)."""
    try:
        quota_bytes = parse_size(size)
    except ValueError as error:
        fail(str(error))
    with engram_client(addr, token) as client:
        call(lambda: client.set_tenant_quota(tenant, quota_bytes))
    if as_json:
        emit({"tenant": tenant, "quota_bytes": quota_bytes})
        return
    console.print(f"quota of {tenant} set to {format_size(quota_bytes)}", highlight=False)


@quota_app.command("reconcile")
def quota_reconcile(
    tenant: Annotated[str, typer.Option("--tenant", help="Default: yours.")] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Recompute a tenant's usage counters from its documents and correct drift."""
    from rich.table import Table

    with engram_client(addr, token) as client:
        report = call(lambda: client.reconcile(tenant))
    if as_json:
        emit(jsonable(report))
        return
    if not report.drifts:
        console.print(f"no drift ({report.spaces_checked} spaces checked)")
        return
    table = Table("counter", "recorded", "actual")
    for drift in report.drifts:
        table.add_row(drift.counter, str(drift.recorded_bytes), str(drift.actual_bytes))
    console.print(table)


def audit(
    limit: Annotated[int, typer.Option("--limit", help="Events to show.")] = 50,
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Show the audit log of global-space changes (platform admins)."""
    from rich import box
    from rich.table import Table

    with engram_client(addr, token) as client:
        found = client.iter_audit_events(page_size=min(500, limit))
        events = call(lambda: list(islice(found, limit)))
    if as_json:
        fields = (
            "event_id",
            "at",
            "action",
            "subject",
            "tenant",
            "space_id",
            "path",
            "bytes_delta",
        )
        emit({"events": [record(event, fields) for event in events]})
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("at (UTC)", no_wrap=True)
    table.add_column("action", no_wrap=True)
    table.add_column("by", overflow="fold")
    table.add_column("space / path", overflow="fold")
    table.add_column("bytes", justify="right", no_wrap=True)
    for event in events:
        table.add_row(
            compact_time(event.at),
            event.action,
            event.subject,
            f"{space_label(event.space_id)} {event.path}".strip(),
            f"{event.bytes_delta:+d}",
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
    app.add_typer(quota_app, name="quota")
    app.command()(audit)
