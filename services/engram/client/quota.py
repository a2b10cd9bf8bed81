"""QuotaService calls: charges (idempotent by key), usage, tenant limits, reconciliation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from engram.client.base import UNAVAILABLE_OR_LATE, AnySpace, ClientBase
from engram.client.mapping import space_to_proto
from engram.v1 import quota_pb2, quota_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.quota import Charge, QuotaUsage, Reconciliation, TenantOrg


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
        from engram.client.results.quota import charge

        return charge(response)

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
        from engram.client.results.quota import quota_usage

        return quota_usage(response)

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
        from engram.client.results.quota import tenant_org

        return tenant_org(response)

    async def reconcile(self, tenant: str = "") -> Reconciliation:
        """Recomputes the tenant's counters from the stored documents, correcting drift."""
        request = quota_pb2.ReconcileRequest(tenant=tenant)
        response = await self._call(
            "QuotaService.Reconcile", self._stub(_quota).Reconcile, request, idempotent=True
        )
        from engram.client.results.quota import reconciliation

        return reconciliation(response)
