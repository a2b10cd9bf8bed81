"""Client commands for identity and quotas: token create|list|revoke, quota
show|set|reconcile, audit."""

import time
from functools import partial
from typing import Annotated, Any, cast

import typer

from engram.cli.client import (
    AddrOption,
    JsonOption,
    TokenOption,
    call,
    channel,
    compact_time,
    console,
    emit,
    fail,
    format_size,
    metadata,
    parse_size,
    space_label,
    timestamp,
    typer_app,
)

# Role numbers of authz.proto.
ROLES = {"viewer": 1, "config_editor": 2, "member": 3, "admin": 4}
ROLE_NAMES = {number: name for name, number in ROLES.items()}


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
    from engram.v1 import authz_pb2, authz_pb2_grpc

    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)}")
    request = authz_pb2.CreateTokenRequest(
        user=user,
        role=cast("authz_pb2.Role.ValueType", ROLES[role]),
        ttl_seconds=days * 86400,
        description=description,
        tenant=tenant,
    )
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        created = call(partial(stub.CreateToken, request, metadata=metadata(token)))
    if as_json:
        emit(
            {
                "token_id": created.token_id,
                "token": created.token,
                "expires_at": timestamp(created.expires_at),
            }
        )
        return
    console.print(
        f"token id [bold]{created.token_id}[/], expires "
        f"{created.expires_at.ToDatetime().date().isoformat()}",
        highlight=False,
    )
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

    from engram.v1 import authz_pb2, authz_pb2_grpc

    tokens: list[Any] = []
    page = ""
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        while True:
            request = authz_pb2.ListTokensRequest(
                tenant=tenant, user=user, page_size=1000, page_token=page
            )
            response = call(partial(stub.ListTokens, request, metadata=metadata(token)))
            tokens.extend(response.tokens)
            page = response.next_page_token
            if not page:
                break
    tokens.sort(key=lambda info: (info.created_at.seconds, info.created_at.nanos, info.token_id))
    if as_json:
        emit(
            {
                "tokens": [
                    {
                        "token_id": info.token_id,
                        "tenant": info.tenant,
                        "user": info.user,
                        "role": ROLE_NAMES.get(info.role, "unspecified"),
                        "description": info.description,
                        "created_at": timestamp(info.created_at),
                        "expires_at": timestamp(info.expires_at),
                        "created_by": info.created_by,
                        "revoked": info.revoked,
                        "revoked_at": timestamp(info.revoked_at),
                    }
                    for info in tokens
                ]
            }
        )
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("user", overflow="fold")
    table.add_column("role", no_wrap=True)
    table.add_column("expires", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("description", overflow="fold")
    now = time.time()
    for info in tokens:
        state = (
            "revoked"
            if info.revoked
            else ("expired" if info.expires_at.seconds < now else "active")
        )
        table.add_row(
            info.token_id,
            info.user,
            ROLE_NAMES.get(info.role, "?"),
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
    from engram.v1 import authz_pb2, authz_pb2_grpc

    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        call(
            partial(
                stub.RevokeToken,
                authz_pb2.RevokeTokenRequest(token_id=token_id),
                metadata=metadata(token),
            )
        )
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

    from engram.v1 import quota_pb2, quota_pb2_grpc

    with channel(addr) as opened:
        stub = quota_pb2_grpc.QuotaServiceStub(opened)
        usage = call(
            partial(
                stub.GetUsage,
                quota_pb2.QuotaServiceGetUsageRequest(tenant=tenant),
                metadata=metadata(token),
            )
        )
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
    from engram.v1 import quota_pb2, quota_pb2_grpc

    try:
        quota_bytes = parse_size(size)
    except ValueError as error:
        fail(str(error))
    with channel(addr) as opened:
        stub = quota_pb2_grpc.QuotaServiceStub(opened)
        call(
            partial(
                stub.SetTenantQuota,
                quota_pb2.SetTenantQuotaRequest(tenant=tenant, quota_bytes=quota_bytes),
                metadata=metadata(token),
            )
        )
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

    from engram.v1 import quota_pb2, quota_pb2_grpc

    with channel(addr) as opened:
        stub = quota_pb2_grpc.QuotaServiceStub(opened)
        report = call(
            partial(
                stub.Reconcile, quota_pb2.ReconcileRequest(tenant=tenant), metadata=metadata(token)
            )
        )
    if as_json:
        emit(
            {
                "spaces_checked": report.spaces_checked,
                "drifts": [
                    {
                        "counter": drift.counter,
                        "recorded_bytes": drift.recorded_bytes,
                        "actual_bytes": drift.actual_bytes,
                    }
                    for drift in report.drifts
                ],
            }
        )
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

    from engram.v1 import authz_pb2, authz_pb2_grpc

    events: list[Any] = []
    page = ""
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        while len(events) < limit:
            response = call(
                partial(
                    stub.ListAuditEvents,
                    authz_pb2.ListAuditEventsRequest(
                        page_size=min(500, limit - len(events)), page_token=page
                    ),
                    metadata=metadata(token),
                )
            )
            events.extend(response.events)
            page = response.next_page_token
            if not page:
                break
    if as_json:
        emit(
            {
                "events": [
                    {
                        "event_id": event.event_id,
                        "at": timestamp(event.at),
                        "action": event.action,
                        "subject": event.subject,
                        "tenant": event.tenant,
                        "space_id": event.space_id,
                        "path": event.path,
                        "bytes_delta": event.bytes_delta,
                    }
                    for event in events
                ]
            }
        )
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
