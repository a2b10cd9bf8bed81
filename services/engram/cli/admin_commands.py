"""Client commands for identity and quotas: token create|revoke, quota show|set|reconcile,
audit."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer
from rich.table import Table

from engram.cli.client import AddrOption, TokenOption, call, channel, console, fail, metadata
from engram.runtime.sizes import format_size, parse_size
from engram.v1 import authz_pb2, authz_pb2_grpc, quota_pb2, quota_pb2_grpc

ROLES = {
    "viewer": authz_pb2.ROLE_VIEWER,
    "config_editor": authz_pb2.ROLE_CONFIG_EDITOR,
    "member": authz_pb2.ROLE_MEMBER,
    "admin": authz_pb2.ROLE_ADMIN,
}


token_app = typer.Typer(help="Personal access tokens.", no_args_is_help=True)
quota_app = typer.Typer(help="Tenant quotas and usage.", no_args_is_help=True)


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option("--role", help="|".join(ROLES))] = "member",
    user: Annotated[str, typer.Option("--user", help="The token's user (default: you).")] = "",
    days: Annotated[int, typer.Option("--days", help="Lifetime in days (0 = 90).")] = 0,
    description: Annotated[str, typer.Option("--description", "-d")] = "",
    tenant: Annotated[str, typer.Option("--tenant", help="Platform admins only.")] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
) -> None:
    """Create a personal access token (tenant admins). It is shown once."""
    if role not in ROLES:
        fail(f"--role must be one of {', '.join(ROLES)}")
    request = authz_pb2.CreateTokenRequest(
        user=user,
        role=ROLES[role],
        ttl_seconds=days * 86400,
        description=description,
        tenant=tenant,
    )
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        created = call(partial(stub.CreateToken, request, metadata=metadata(token)))
    console.print(
        f"token id [bold]{created.token_id}[/], expires "
        f"{created.expires_at.ToDatetime().date().isoformat()}",
        highlight=False,
    )
    console.print("store it now; it is not shown again:", style="dim")
    typer.echo(created.token)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The id `token create` printed.")],
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
) -> None:
    """Revoke a personal access token."""
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        call(
            partial(
                stub.RevokeToken,
                authz_pb2.RevokeTokenRequest(token_id=token_id),
                metadata=metadata(token),
            )
        )
    console.print(f"revoked {token_id}", highlight=False)


@quota_app.command("show")
def quota_show(
    tenant: Annotated[
        str, typer.Option("--tenant", help="Default: yours; 'instance' = global spaces.")
    ] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
) -> None:
    """Show a tenant's usage and limit."""
    with channel(addr) as opened:
        stub = quota_pb2_grpc.QuotaServiceStub(opened)
        usage = call(
            partial(
                stub.GetUsage,
                quota_pb2.QuotaServiceGetUsageRequest(tenant=tenant),
                metadata=metadata(token),
            )
        )
    table = Table("tenant", "used", "limit", "source")
    table.add_row(
        usage.tenant,
        format_size(usage.tenant_used_bytes),
        format_size(usage.tenant_quota_bytes),
        "override" if usage.tenant_quota_overridden else "default",
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
) -> None:
    """Set a tenant's aggregate limit (platform admins)."""
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
    console.print(f"quota of {tenant} set to {format_size(quota_bytes)}", highlight=False)


@quota_app.command("reconcile")
def quota_reconcile(
    tenant: Annotated[str, typer.Option("--tenant", help="Default: yours.")] = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
) -> None:
    """Recompute a tenant's usage counters from its documents and correct drift."""
    with channel(addr) as opened:
        stub = quota_pb2_grpc.QuotaServiceStub(opened)
        report = call(
            partial(
                stub.Reconcile, quota_pb2.ReconcileRequest(tenant=tenant), metadata=metadata(token)
            )
        )
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
) -> None:
    """Show the audit log of global-space changes (platform admins)."""
    table = Table()
    for column in ("at", "action", "subject", "space", "path", "bytes"):
        table.add_column(column, overflow="fold")
    shown = 0
    page = ""
    with channel(addr) as opened:
        stub = authz_pb2_grpc.AuthzServiceStub(opened)
        while shown < limit:
            response = call(
                partial(
                    stub.ListAuditEvents,
                    authz_pb2.ListAuditEventsRequest(
                        page_size=min(500, limit - shown), page_token=page
                    ),
                    metadata=metadata(token),
                )
            )
            for event in response.events:
                table.add_row(
                    event.at.ToDatetime().isoformat(timespec="seconds") + "Z",
                    event.action,
                    event.subject,
                    event.space_id,
                    event.path,
                    f"{event.bytes_delta:+d}",
                )
                shown += 1
            page = response.next_page_token
            if not page:
                break
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
    app.add_typer(quota_app, name="quota")
    app.command()(audit)
