"""QuotaService over gRPC on SQLite and MongoDB: Charge, limits, overrides, Reconcile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.client import (
    AsyncClient,
    InvalidArgument,
    PermissionDenied,
    QuotaExceeded,
    Space,
)
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, refused, secure_deployment
from tests.support.tokens import mint, service_token

pytestmark = pytest.mark.contract

SERVICE = service_token("storage")
MEMBER = mint("ann", "acme", "member")
ADMIN = mint("ada", "acme", "admin")
PLATFORM = mint("root", "acme", "admin", platform_admin=True)
NOTES = Space(name="notes")
ACME = Space(name="notes", tenant="acme")


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


def quota(deployment: Deployment, who: str) -> AsyncClient:
    # retries=0: each answer and refusal is the first attempt's.
    return deployment.client("quota", who).with_options(retries=0, space=ACME)


def storage(deployment: Deployment, who: str) -> AsyncClient:
    return deployment.client("storage", who).with_options(retries=0, space=NOTES)


async def test_charge_is_for_services_and_idempotent(deployment: Deployment) -> None:
    service = quota(deployment, SERVICE)
    await refused(quota(deployment, MEMBER).charge(10, idempotency_key="k0"), PermissionDenied)
    first = await service.charge(100, idempotency_key="k1")
    assert first.applied and first.space_used_bytes == 100 and first.tenant_used_bytes == 100
    again = await service.charge(100, idempotency_key="k1")
    assert not again.applied and again.space_used_bytes == 100, "a retried key applies once"
    await refused(service.charge(5, idempotency_key=""), InvalidArgument)


async def test_shrinking_never_goes_below_zero(deployment: Deployment) -> None:
    service = quota(deployment, SERVICE)
    await service.charge(50, idempotency_key="a")
    shrunk = await service.charge(-80, idempotency_key="b")
    assert shrunk.applied and shrunk.space_used_bytes == 0 and shrunk.tenant_used_bytes == 0


async def test_each_limit_is_named_when_hit(deployment: Deployment) -> None:
    service, platform = quota(deployment, SERVICE), quota(deployment, PLATFORM)
    await service.charge(900, idempotency_key="fill")
    failure = await refused(
        service.charge(101, idempotency_key="over"), QuotaExceeded, "QUOTA_EXCEEDED"
    )
    assert failure.metadata == {
        "limit": "space_subcap",
        "limit_bytes": "1000",
        "used_bytes": "900",
        "requested_bytes": "101",
    }
    # The QuotaFailure detail names the counter: the limit, then the space.
    assert failure.subject == "v1:private:acme::::notes"
    await platform.set_tenant_quota("acme", 950)
    await asyncio.sleep(2.1)  # another process's override cache (2 s) must expire
    failure = await refused(
        service.charge(60, idempotency_key="t", space=Space(name="b", tenant="acme")),
        QuotaExceeded,
    )
    assert failure.limit == "tenant_total"
    await platform.set_tenant_quota("instance", 10)
    await asyncio.sleep(2.1)
    glob = Space("global", "g")
    failure = await refused(service.charge(11, idempotency_key="i", space=glob), QuotaExceeded)
    assert failure.limit == "instance_total"
    assert (await service.charge(10, idempotency_key="i2", space=glob)).applied


async def test_set_tenant_quota_is_for_platform_admins(deployment: Deployment) -> None:
    platform, member = quota(deployment, PLATFORM), quota(deployment, MEMBER)
    await refused(quota(deployment, ADMIN).set_tenant_quota("acme", 1), PermissionDenied)
    await refused(platform.set_tenant_quota("acme", -1), InvalidArgument)
    await platform.set_tenant_quota("acme", 4096)
    usage = await member.quota_usage()
    assert (usage.tenant, usage.tenant_quota_bytes, usage.tenant_quota_overridden) == (
        "acme",
        4096,
        True,
    )
    await refused(member.quota_usage(tenant="globex"), PermissionDenied)


async def test_zero_tenant_quota_refuses_growing_writes(deployment: Deployment) -> None:
    await quota(deployment, PLATFORM).set_tenant_quota("acme", 0)
    failure = await refused(storage(deployment, MEMBER).write_document("a.md", "x"), QuotaExceeded)
    assert failure.limit == "tenant_total"


async def test_usage_tracks_writes_and_reconcile_corrects_drift(deployment: Deployment) -> None:
    writer, member = storage(deployment, MEMBER), quota(deployment, MEMBER)
    admin = quota(deployment, ADMIN)
    await writer.write_document("a.md", "x" * 300)
    await writer.write_document("b.md", "y" * 200, space=Space(name="other"))
    usage = await member.quota_usage(space=NOTES)
    assert (usage.space_used_bytes, usage.space_document_count, usage.tenant_used_bytes) == (
        300,
        1,
        500,
    )
    clean = await admin.reconcile()
    assert clean.drifts == () and clean.spaces_checked == 2
    # A charge that was never followed by a write (a crashed writer): drift, until Reconcile.
    await quota(deployment, SERVICE).charge(77, idempotency_key="orphan")
    await refused(member.reconcile(), PermissionDenied)
    fixed = await admin.reconcile()
    assert sorted(
        (d.counter.split(":")[0], d.recorded_bytes, d.actual_bytes) for d in fixed.drifts
    ) == [("space", 377, 300), ("tenant", 577, 500)]
    again = await admin.reconcile()
    assert again.drifts == ()
    after = await writer.get_usage()
    assert after.used_bytes == 300 and after.tenant_used_bytes == 500
