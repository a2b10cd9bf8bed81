"""QuotaService servicer: protobuf in, domain call, protobuf out."""

from __future__ import annotations

from typing import Any

import grpc

from engram.authz.enforcement import PolicyAuthorizer
from engram.domain.errors import PermissionDenied
from engram.domain.policy import space_target
from engram.domain.ports import Authorizer
from engram.domain.principals import Action
from engram.quota.service import QuotaService
from engram.runtime.context import current_principal
from engram.v1 import quota_pb2, quota_pb2_grpc
from engram.wire import requested_space

Context = grpc.aio.ServicerContext[Any, Any]


class QuotaServicer(quota_pb2_grpc.QuotaServiceServicer):
    def __init__(self, service: QuotaService, authorizer: Authorizer | None = None) -> None:
        self._service = service
        self._authorizer = authorizer or PolicyAuthorizer()

    async def Charge(
        self, request: quota_pb2.ChargeRequest, context: Context
    ) -> quota_pb2.ChargeResponse:
        principal = current_principal()
        space = requested_space(request.space)
        if not await self._authorizer.permits(
            principal, Action.CHARGE, space_target(principal, space)
        ):
            raise PermissionDenied(
                "Charge is called by the storage service (service principals) only",
                rule="service_principal_required",
            )
        # The caller (storage) already authorized the change; here the space is only
        # validated and stamped.
        granted = await self._authorizer.authorize(principal, Action.USAGE, space)
        charged = await self._service.apply_charge(
            granted.space,
            request.delta_bytes,
            request.idempotency_key,
            attributed_tenant=request.attributed_tenant,
        )
        return quota_pb2.ChargeResponse(
            applied=charged.applied,
            space_used_bytes=charged.space_used_bytes,
            tenant_used_bytes=charged.aggregate_used_bytes,
            org_used_bytes=charged.org_used_bytes,
        )

    async def GetUsage(
        self, request: quota_pb2.QuotaServiceGetUsageRequest, context: Context
    ) -> quota_pb2.QuotaServiceGetUsageResponse:
        principal = current_principal()
        response = quota_pb2.QuotaServiceGetUsageResponse()
        if request.HasField("space"):
            granted = await self._authorizer.authorize(
                principal, Action.USAGE, requested_space(request.space)
            )
            report = await self._service.usage(granted.space)
            response.space_used_bytes = report.space_used_bytes
            response.space_quota_bytes = report.space_quota_bytes
            if not request.without_document_count:
                response.space_document_count = await self._service.document_count(granted.space)
        tenant = await self._service.tenant_usage(principal, request.tenant)
        response.tenant = tenant.tenant
        response.tenant_used_bytes = tenant.used_bytes
        response.tenant_quota_bytes = tenant.quota_bytes
        response.tenant_quota_overridden = tenant.overridden
        response.tenant_effective_quota_bytes = tenant.effective_quota_bytes
        response.org = tenant.org
        response.org_used_bytes = tenant.org_used_bytes
        response.org_quota_set = tenant.org_quota_bytes is not None
        response.org_quota_bytes = tenant.org_quota_bytes or 0
        response.global_attributed_bytes = tenant.global_attributed_bytes
        return response

    async def SetTenantQuota(
        self, request: quota_pb2.SetTenantQuotaRequest, context: Context
    ) -> quota_pb2.SetTenantQuotaResponse:
        quota = await self._service.set_tenant_quota(
            current_principal(), request.tenant, request.quota_bytes
        )
        return quota_pb2.SetTenantQuotaResponse(tenant=request.tenant, quota_bytes=quota)

    async def Reconcile(
        self, request: quota_pb2.ReconcileRequest, context: Context
    ) -> quota_pb2.ReconcileResponse:
        report = await self._service.reconcile(current_principal(), request.tenant)
        return quota_pb2.ReconcileResponse(
            drifts=[
                quota_pb2.UsageDrift(
                    counter=d.counter, recorded_bytes=d.recorded_bytes, actual_bytes=d.actual_bytes
                )
                for d in report.drifts
            ],
            spaces_checked=report.spaces_checked,
        )

    async def SetOrgQuota(
        self, request: quota_pb2.SetOrgQuotaRequest, context: Context
    ) -> quota_pb2.SetOrgQuotaResponse:
        org = await self._service.orgs.set_ceiling(
            current_principal(), request.org, request.quota_bytes
        )
        return quota_pb2.SetOrgQuotaResponse(org=org, quota_bytes=request.quota_bytes)

    async def SetTenantOrg(
        self, request: quota_pb2.SetTenantOrgRequest, context: Context
    ) -> quota_pb2.SetTenantOrgResponse:
        used = await self._service.orgs.set_membership(
            current_principal(), request.tenant, request.org
        )
        return quota_pb2.SetTenantOrgResponse(
            tenant=request.tenant, org=request.org, org_used_bytes=used
        )
