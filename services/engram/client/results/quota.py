"""QuotaService's results: charges, usage, org membership, reconciliation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram.v1 import quota_pb2


@dataclass(frozen=True, slots=True)
class Charge:
    # False when the idempotency key had already been applied.
    applied: bool
    space_used_bytes: int
    tenant_used_bytes: int
    # The org's counter after the charge (0 when the tenant is in no org).
    org_used_bytes: int = 0


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    tenant: str
    tenant_used_bytes: int
    tenant_quota_bytes: int
    # The space's figures, when one was asked for.
    space_used_bytes: int = 0
    space_quota_bytes: int = 0
    space_document_count: int = 0
    # The tenant's limit comes from set_tenant_quota, not the default.
    tenant_quota_overridden: bool = False
    # What the tenant may use: the lesser of tenant_quota_bytes and its org's ceiling.
    tenant_effective_quota_bytes: int = 0
    # The tenant's org ("" = none), what its teams use together, and its ceiling (None =
    # no ceiling set).
    org: str = ""
    org_used_bytes: int = 0
    org_quota_bytes: int | None = None
    # Bytes of global spaces the tenant's changes account for (attribution only).
    global_attributed_bytes: int = 0


@dataclass(frozen=True, slots=True)
class TenantOrg:
    tenant: str
    # "" = in no org.
    org: str
    # The bytes the org's teams use together, the tenant's included.
    org_used_bytes: int


@dataclass(frozen=True, slots=True)
class UsageDrift:
    # "space:<space_id>", "tenant:<tenant>" or "instance".
    counter: str
    recorded_bytes: int
    actual_bytes: int


@dataclass(frozen=True, slots=True)
class Reconciliation:
    drifts: tuple[UsageDrift, ...]
    spaces_checked: int


def charge(message: quota_pb2.ChargeResponse) -> Charge:
    return Charge(
        message.applied,
        message.space_used_bytes,
        message.tenant_used_bytes,
        message.org_used_bytes,
    )


def quota_usage(message: quota_pb2.QuotaServiceGetUsageResponse) -> QuotaUsage:
    return QuotaUsage(
        tenant=message.tenant,
        tenant_used_bytes=message.tenant_used_bytes,
        tenant_quota_bytes=message.tenant_quota_bytes,
        space_used_bytes=message.space_used_bytes,
        space_quota_bytes=message.space_quota_bytes,
        space_document_count=message.space_document_count,
        tenant_quota_overridden=message.tenant_quota_overridden,
        tenant_effective_quota_bytes=message.tenant_effective_quota_bytes,
        org=message.org,
        org_used_bytes=message.org_used_bytes,
        org_quota_bytes=message.org_quota_bytes if message.org_quota_set else None,
        global_attributed_bytes=message.global_attributed_bytes,
    )


def tenant_org(message: quota_pb2.SetTenantOrgResponse) -> TenantOrg:
    return TenantOrg(message.tenant, message.org, message.org_used_bytes)


def reconciliation(message: quota_pb2.ReconcileResponse) -> Reconciliation:
    return Reconciliation(
        drifts=tuple(
            UsageDrift(d.counter, d.recorded_bytes, d.actual_bytes) for d in message.drifts
        ),
        spaces_checked=message.spaces_checked,
    )
