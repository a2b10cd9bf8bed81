"""QuotaService calls: charges (idempotent by key), usage, tenant limits, reconciliation."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from engram.client.base import UNAVAILABLE_OR_LATE, AnySpace, ClientBase
from engram.client.mapping import space_to_proto
from engram.v1 import quota_pb2, quota_pb2_grpc


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


def _quota(channel: grpc.aio.Channel) -> quota_pb2_grpc.QuotaServiceAsyncStub:
    return quota_pb2_grpc.QuotaServiceStub(channel)


class QuotaCalls(ClientBase):
    """QuotaService."""

    async def charge(
        self,
        delta_bytes: int,
        *,
        idempotency_key: str,
        space: AnySpace | None = None,
        attributed_tenant: str = "",
    ) -> Charge:
        """Applies a byte delta to the space, its tenant and the tenant's org if no limit
        would be exceeded (QuotaExceeded otherwise). For a global space,
        `attributed_tenant` names the tenant whose principal made the change (attribution
        only). Retried on UNAVAILABLE and on DEADLINE_EXCEEDED (an answer lost on its way
        back): the key makes a repeat apply once."""
        request = quota_pb2.ChargeRequest(
            space=self._space(space),
            delta_bytes=delta_bytes,
            idempotency_key=idempotency_key,
            attributed_tenant=attributed_tenant,
        )
        response = await self._call(
            "QuotaService.Charge",
            self._stub(_quota).Charge,
            request,
            idempotent=bool(idempotency_key),
            retry_on=UNAVAILABLE_OR_LATE,
        )
        return Charge(
            response.applied,
            response.space_used_bytes,
            response.tenant_used_bytes,
            response.org_used_bytes,
        )

    async def quota_usage(
        self,
        *,
        tenant: str = "",
        space: AnySpace | None = None,
        without_document_count: bool = False,
    ) -> QuotaUsage:
        """A tenant's usage and limit ("" = yours, "instance" = the global spaces'), its
        org's usage and ceiling, and the space's when one is named (its document count
        too, unless `without_document_count`: QuotaService asks storage for it)."""
        request = quota_pb2.QuotaServiceGetUsageRequest(
            tenant=tenant, without_document_count=without_document_count
        )
        if space is not None:
            request.space.CopyFrom(space_to_proto(space))
        response = await self._call(
            "QuotaService.GetUsage", self._stub(_quota).GetUsage, request, idempotent=True
        )
        return QuotaUsage(
            tenant=response.tenant,
            tenant_used_bytes=response.tenant_used_bytes,
            tenant_quota_bytes=response.tenant_quota_bytes,
            space_used_bytes=response.space_used_bytes,
            space_quota_bytes=response.space_quota_bytes,
            space_document_count=response.space_document_count,
            tenant_quota_overridden=response.tenant_quota_overridden,
            tenant_effective_quota_bytes=response.tenant_effective_quota_bytes,
            org=response.org,
            org_used_bytes=response.org_used_bytes,
            org_quota_bytes=response.org_quota_bytes if response.org_quota_set else None,
            global_attributed_bytes=response.global_attributed_bytes,
        )

    async def set_tenant_quota(self, tenant: str, quota_bytes: int) -> int:
        """Sets a tenant's aggregate limit ("instance": the global spaces'); returns it.
        Retried on UNAVAILABLE: setting the same limit twice is setting it once."""
        request = quota_pb2.SetTenantQuotaRequest(tenant=tenant, quota_bytes=quota_bytes)
        response = await self._call(
            "QuotaService.SetTenantQuota",
            self._stub(_quota).SetTenantQuota,
            request,
            idempotent=True,
        )
        return response.quota_bytes

    async def set_org_quota(self, quota_bytes: int, *, org: str = "") -> int:
        """Sets an org's ceiling ("" = your team's org; org admins of a team of the org, or
        platform admins); returns it. Retried on UNAVAILABLE: setting it twice is once."""
        request = quota_pb2.SetOrgQuotaRequest(org=org, quota_bytes=quota_bytes)
        response = await self._call(
            "QuotaService.SetOrgQuota", self._stub(_quota).SetOrgQuota, request, idempotent=True
        )
        return response.quota_bytes

    async def set_tenant_org(self, tenant: str, org: str) -> TenantOrg:
        """Puts a tenant in an org ("" takes it out); platform admins. Retried on
        UNAVAILABLE: the same membership set twice is set once."""
        request = quota_pb2.SetTenantOrgRequest(tenant=tenant, org=org)
        response = await self._call(
            "QuotaService.SetTenantOrg", self._stub(_quota).SetTenantOrg, request, idempotent=True
        )
        return TenantOrg(response.tenant, response.org, response.org_used_bytes)

    async def reconcile(self, tenant: str = "") -> Reconciliation:
        """Recomputes the tenant's counters from the stored documents, correcting drift."""
        request = quota_pb2.ReconcileRequest(tenant=tenant)
        response = await self._call(
            "QuotaService.Reconcile", self._stub(_quota).Reconcile, request, idempotent=True
        )
        return Reconciliation(
            drifts=tuple(
                UsageDrift(d.counter, d.recorded_bytes, d.actual_bytes) for d in response.drifts
            ),
            spaces_checked=response.spaces_checked,
        )
