"""QuotaService over gRPC on SQLite and MongoDB: Charge, limits, overrides, Reconcile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from engram.v1 import quota_pb2, space_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, secure_deployment
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.tokens import bearer, mint, service_token

pytestmark = pytest.mark.contract

SERVICE = bearer(service_token("storage"))
MEMBER = bearer(mint("ann", "acme", "member"))
ADMIN = bearer(mint("ada", "acme", "admin"))
PLATFORM = bearer(mint("root", "acme", "admin", platform_admin=True))
ACME = space(tenant="acme")


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(
        request.param, tmp_path, real_backends, quota_private=1000
    ) as running:
        yield running


def charge(ref: space_pb2.SpaceRef, delta: int, key: str) -> quota_pb2.ChargeRequest:
    return quota_pb2.ChargeRequest(space=ref, delta_bytes=delta, idempotency_key=key)


async def test_charge_is_for_services_and_idempotent(deployment: Deployment) -> None:
    quota = deployment.quota()
    await fails(
        quota.Charge(charge(ACME, 10, "k0"), metadata=MEMBER), grpc.StatusCode.PERMISSION_DENIED
    )
    first = await quota.Charge(charge(ACME, 100, "k1"), metadata=SERVICE)
    assert first.applied and first.space_used_bytes == 100 and first.tenant_used_bytes == 100
    again = await quota.Charge(charge(ACME, 100, "k1"), metadata=SERVICE)
    assert not again.applied and again.space_used_bytes == 100, "a retried key applies once"
    await fails(
        quota.Charge(charge(ACME, 5, ""), metadata=SERVICE), grpc.StatusCode.INVALID_ARGUMENT
    )


async def test_shrinking_never_goes_below_zero(deployment: Deployment) -> None:
    quota = deployment.quota()
    await quota.Charge(charge(ACME, 50, "a"), metadata=SERVICE)
    shrunk = await quota.Charge(charge(ACME, -80, "b"), metadata=SERVICE)
    assert shrunk.applied and shrunk.space_used_bytes == 0 and shrunk.tenant_used_bytes == 0


async def test_each_limit_is_named_when_hit(deployment: Deployment) -> None:
    quota = deployment.quota()
    await quota.Charge(charge(ACME, 900, "fill"), metadata=SERVICE)
    failure = await fails(
        quota.Charge(charge(ACME, 101, "over"), metadata=SERVICE),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "QUOTA_EXCEEDED",
    )
    assert failure.metadata == {
        "limit": "space_subcap",
        "limit_bytes": "1000",
        "used_bytes": "900",
        "requested_bytes": "101",
    }
    assert (
        failure.detail(error_details_pb2.QuotaFailure)
        .violations[0]
        .subject.startswith("space_subcap:")
    )
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=950), metadata=PLATFORM
    )
    await asyncio.sleep(2.1)  # another process's override cache (2 s) must expire
    failure = await fails(
        quota.Charge(charge(space("b", tenant="acme"), 60, "t"), metadata=SERVICE),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert failure.metadata["limit"] == "tenant_total"
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="instance", quota_bytes=10), metadata=PLATFORM
    )
    await asyncio.sleep(2.1)
    glob = space("g", space_pb2.VISIBILITY_GLOBAL)
    failure = await fails(
        quota.Charge(charge(glob, 11, "i"), metadata=SERVICE), grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert failure.metadata["limit"] == "instance_total"
    assert (await quota.Charge(charge(glob, 10, "i2"), metadata=SERVICE)).applied


async def test_set_tenant_quota_is_for_platform_admins(deployment: Deployment) -> None:
    quota = deployment.quota()
    await fails(
        quota.SetTenantQuota(
            quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=1), metadata=ADMIN
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    await fails(
        quota.SetTenantQuota(
            quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=-1), metadata=PLATFORM
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=4096), metadata=PLATFORM
    )
    usage = await quota.GetUsage(quota_pb2.QuotaServiceGetUsageRequest(), metadata=MEMBER)
    assert (usage.tenant, usage.tenant_quota_bytes, usage.tenant_quota_overridden) == (
        "acme",
        4096,
        True,
    )
    await fails(
        quota.GetUsage(quota_pb2.QuotaServiceGetUsageRequest(tenant="globex"), metadata=MEMBER),
        grpc.StatusCode.PERMISSION_DENIED,
    )


async def test_zero_tenant_quota_refuses_growing_writes(deployment: Deployment) -> None:
    await deployment.quota().SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=0), metadata=PLATFORM
    )
    storage = deployment.storage()
    failure = await fails(
        storage.WriteDocument(write_request("a.md", "x"), metadata=MEMBER),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert failure.metadata["limit"] == "tenant_total"


async def test_usage_tracks_writes_and_reconcile_corrects_drift(deployment: Deployment) -> None:
    storage, quota = deployment.storage(), deployment.quota()
    await storage.WriteDocument(write_request("a.md", "x" * 300), metadata=MEMBER)
    await storage.WriteDocument(
        write_request("b.md", "y" * 200, ref=space("other")), metadata=MEMBER
    )
    usage = await quota.GetUsage(
        quota_pb2.QuotaServiceGetUsageRequest(space=space()), metadata=MEMBER
    )
    assert (usage.space_used_bytes, usage.space_document_count, usage.tenant_used_bytes) == (
        300,
        1,
        500,
    )
    clean = await quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=ADMIN)
    assert list(clean.drifts) == [] and clean.spaces_checked == 2
    # A charge that was never followed by a write (a crashed writer): drift, until Reconcile.
    await quota.Charge(charge(ACME, 77, "orphan"), metadata=SERVICE)
    await fails(
        quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=MEMBER),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    fixed = await quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=ADMIN)
    assert sorted(
        (d.counter.split(":")[0], d.recorded_bytes, d.actual_bytes) for d in fixed.drifts
    ) == [("space", 377, 300), ("tenant", 577, 500)]
    again = await quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=ADMIN)
    assert list(again.drifts) == []
    after = await storage.GetUsage(storage_pb2.GetUsageRequest(space=space()), metadata=MEMBER)
    assert after.used_bytes == 300 and after.tenant_used_bytes == 500
