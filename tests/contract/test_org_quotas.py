"""Org quotas (seed 003) over gRPC on SQLite and MongoDB: an org groups teams (tenants) under
one ceiling set by its org admin; each team's effective quota is the lesser of its own and
the org's, teams put in the org later included; racing writers of two teams never pass the
ceiling together; global writes meet the instance total and are attributed to the writing
team without counting towards its quota."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.v1 import quota_pb2, space_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, secure_deployment
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.tokens import bearer, mint, service_token

pytestmark = pytest.mark.contract

SERVICE = bearer(service_token("storage"))
ACME_MEMBER = bearer(mint("ann", "acme", "member"))
ACME_ADMIN = bearer(mint("ada", "acme", "admin"))
ACME_ORG_ADMIN = bearer(mint("olga", "acme", "org_admin"))
GLOBEX_MEMBER = bearer(mint("gus", "globex", "member"))
GLOBEX_ORG_ADMIN = bearer(mint("gia", "globex", "org_admin"))
HOOLI_MEMBER = bearer(mint("hal", "hooli", "member"))
PLATFORM = bearer(mint("root", "acme", "admin", platform_admin=True))
GLOBEX_PLATFORM = bearer(mint("groot", "globex", "admin", platform_admin=True))
# Storage (another process on MongoDB) reads memberships and ceilings through a 2 s cache.
CACHE_SECONDS = 2.1
GLOBAL = space("handbook", space_pb2.VISIBILITY_GLOBAL)


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


async def join(deployment: Deployment, tenant: str, org: str) -> int:
    joined = await deployment.quota().SetTenantOrg(
        quota_pb2.SetTenantOrgRequest(tenant=tenant, org=org), metadata=PLATFORM
    )
    return joined.org_used_bytes


async def usage(deployment: Deployment, who: tuple[tuple[str, str], ...], tenant: str = "") -> Any:
    return await deployment.quota().GetUsage(
        quota_pb2.QuotaServiceGetUsageRequest(tenant=tenant), metadata=who
    )


async def test_racers_of_two_teams_never_pass_their_org_ceiling(deployment: Deployment) -> None:
    storage, quota = deployment.storage(), deployment.quota()
    await join(deployment, "acme", "initech")
    await join(deployment, "globex", "initech")
    # The org admin of acme sets the ceiling of acme's org (empty org = the caller's).
    set_ = await quota.SetOrgQuota(
        quota_pb2.SetOrgQuotaRequest(quota_bytes=1000), metadata=ACME_ORG_ADMIN
    )
    assert (set_.org, set_.quota_bytes) == ("initech", 1000)
    await asyncio.sleep(CACHE_SECONDS)

    async def racer(i: int) -> grpc.StatusCode:
        who = ACME_MEMBER if i % 2 else GLOBEX_MEMBER
        try:
            await storage.WriteDocument(write_request(f"r/{i}.md", "x" * 10), metadata=who)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            assert "org_ceiling quota exceeded for initech" in (error.details() or "")
            return error.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(racer(i) for i in range(200)))
    written = codes.count(grpc.StatusCode.OK)
    assert written == 100, "exactly the writes that fit the ceiling land, no more"
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert acme.org == globex.org == "initech"
    assert acme.org_used_bytes == globex.org_used_bytes == 1000
    assert acme.tenant_used_bytes + globex.tenant_used_bytes == 1000
    assert (acme.org_quota_bytes, acme.org_quota_set) == (1000, True)
    # Each team's effective quota: the lesser of its own (1 GiB by default) and the ceiling.
    assert acme.tenant_quota_bytes == 1 << 30 and acme.tenant_effective_quota_bytes == 1000
    # The counters agree with the documents stored: nothing to correct.
    for admin in (ACME_ADMIN, bearer(mint("gil", "globex", "admin"))):
        assert (
            list((await quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=admin)).drifts) == []
        )
    # StorageService's usage reports the effective quota as the tenant's limit.
    du = await storage.GetUsage(storage_pb2.GetUsageRequest(space=space()), metadata=ACME_MEMBER)
    assert du.tenant_quota_bytes == 1000


async def test_a_team_put_in_an_org_later_is_bound_by_its_ceiling(
    deployment: Deployment,
) -> None:
    storage, quota = deployment.storage(), deployment.quota()
    # The ceiling is set on an org with no team yet (a platform admin names any org) ...
    await quota.SetOrgQuota(
        quota_pb2.SetOrgQuotaRequest(org="umbrella", quota_bytes=300), metadata=PLATFORM
    )
    # ... and hooli, which already holds 120 bytes, joins it afterwards: its bytes come along.
    await storage.WriteDocument(write_request("old.md", "h" * 120), metadata=HOOLI_MEMBER)
    assert await join(deployment, "hooli", "umbrella") == 120
    await asyncio.sleep(CACHE_SECONDS)
    shown = await usage(deployment, HOOLI_MEMBER)
    assert (shown.org, shown.org_used_bytes, shown.org_quota_bytes) == ("umbrella", 120, 300)
    assert shown.tenant_effective_quota_bytes == 300
    await storage.WriteDocument(write_request("new.md", "h" * 180), metadata=HOOLI_MEMBER)
    failure = await fails(
        storage.WriteDocument(write_request("one.md", "h"), metadata=HOOLI_MEMBER),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "QUOTA_EXCEEDED",
    )
    assert failure.metadata == {
        "limit": "org_ceiling",
        "limit_bytes": "300",
        "used_bytes": "300",
        "requested_bytes": "1",
    }
    # The lesser of the two: a team whose own quota is below the ceiling meets its own.
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="hooli", quota_bytes=250), metadata=PLATFORM
    )
    await quota.SetOrgQuota(
        quota_pb2.SetOrgQuotaRequest(org="umbrella", quota_bytes=10_000), metadata=PLATFORM
    )
    await asyncio.sleep(CACHE_SECONDS)
    assert (await usage(deployment, HOOLI_MEMBER)).tenant_effective_quota_bytes == 250
    failure = await fails(
        storage.WriteDocument(write_request("one.md", "h"), metadata=HOOLI_MEMBER),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert failure.metadata["limit"] == "tenant_total"
    # A charge never followed by a write drifts the org's counter too; Reconcile fixes both.
    await quota.Charge(
        quota_pb2.ChargeRequest(space=space(tenant="hooli"), delta_bytes=-50, idempotency_key="x"),
        metadata=SERVICE,
    )
    fixed = await quota.Reconcile(
        quota_pb2.ReconcileRequest(), metadata=bearer(mint("hap", "hooli", "admin"))
    )
    assert sorted((d.counter, d.recorded_bytes, d.actual_bytes) for d in fixed.drifts) == [
        ("org:umbrella", 250, 300),
        ("space:v1:private:hooli::::notes", 250, 300),
        ("tenant:hooli", 250, 300),
    ]
    # Leaving the org takes the team's bytes out of the org's counter and frees it.
    assert await join(deployment, "hooli", "") == 0
    left = await usage(deployment, HOOLI_MEMBER)
    assert (left.org, left.org_quota_set, left.tenant_effective_quota_bytes) == ("", False, 250)


async def test_global_writes_meet_the_instance_and_are_attributed_to_the_writer(
    deployment: Deployment,
) -> None:
    storage, quota = deployment.storage(), deployment.quota()
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="instance", quota_bytes=600), metadata=PLATFORM
    )
    # Attribution only: a team with no room of its own still writes global spaces.
    await quota.SetTenantQuota(
        quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=0), metadata=PLATFORM
    )
    await asyncio.sleep(CACHE_SECONDS)
    await storage.WriteDocument(write_request("a.md", "a" * 300, ref=GLOBAL), metadata=PLATFORM)
    await storage.WriteDocument(
        write_request("g.md", "g" * 200, ref=GLOBAL), metadata=GLOBEX_PLATFORM
    )
    failure = await fails(
        storage.WriteDocument(write_request("b.md", "b" * 101, ref=GLOBAL), metadata=PLATFORM),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert failure.metadata["limit"] == "instance_total"
    instance = await usage(deployment, ACME_MEMBER, "instance")
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert instance.tenant_used_bytes == 500
    assert (acme.global_attributed_bytes, globex.global_attributed_bytes) == (300, 200)
    assert acme.tenant_used_bytes == globex.tenant_used_bytes == 0, "not the team's quota"
    # Shrinking and deleting move the instance and the changer's attribution together.
    await storage.WriteDocument(write_request("a.md", "a" * 100, ref=GLOBAL), metadata=PLATFORM)
    await storage.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=GLOBAL, path="g.md"), metadata=GLOBEX_PLATFORM
    )
    instance = await usage(deployment, ACME_MEMBER, "instance")
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert instance.tenant_used_bytes == 100
    assert (acme.global_attributed_bytes, globex.global_attributed_bytes) == (100, 0)
    # Reconciling the instance recounts stored bytes and leaves attribution alone.
    clean = await quota.Reconcile(quota_pb2.ReconcileRequest(tenant="instance"), metadata=PLATFORM)
    assert list(clean.drifts) == []
    assert (await usage(deployment, ACME_MEMBER)).global_attributed_bytes == 100


async def test_who_sets_ceilings_and_memberships(deployment: Deployment) -> None:
    quota = deployment.quota()

    def ceiling(org: str, size: int = 1000) -> quota_pb2.SetOrgQuotaRequest:
        return quota_pb2.SetOrgQuotaRequest(org=org, quota_bytes=size)

    # An org admin of a team in no org has no org to set.
    await fails(
        quota.SetOrgQuota(ceiling(""), metadata=ACME_ORG_ADMIN), grpc.StatusCode.INVALID_ARGUMENT
    )
    await join(deployment, "acme", "initech")
    await join(deployment, "globex", "cyberdyne")
    # Team admins are not org admins; an org admin of another org's team is not this one's.
    await fails(
        quota.SetOrgQuota(ceiling("initech"), metadata=ACME_ADMIN),
        grpc.StatusCode.PERMISSION_DENIED,
        "ORG_ADMIN_REQUIRED",
    )
    await fails(
        quota.SetOrgQuota(ceiling("initech"), metadata=GLOBEX_ORG_ADMIN),
        grpc.StatusCode.PERMISSION_DENIED,
        "PLATFORM_ADMIN_REQUIRED",
    )
    assert (await quota.SetOrgQuota(ceiling("initech"), metadata=ACME_ORG_ADMIN)).org == "initech"
    # Membership binds a team to a ceiling: platform admins only, org admins included.
    await fails(
        quota.SetTenantOrg(
            quota_pb2.SetTenantOrgRequest(tenant="globex", org="initech"), metadata=ACME_ORG_ADMIN
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    for bad in (ceiling("initech", -1), ceiling("a:b"), ceiling("../x")):
        await fails(quota.SetOrgQuota(bad, metadata=PLATFORM), grpc.StatusCode.INVALID_ARGUMENT)
    for tenant, org in (("", "initech"), ("instance", "initech"), ("acme", "a/b")):
        await fails(
            quota.SetTenantOrg(
                quota_pb2.SetTenantOrgRequest(tenant=tenant, org=org), metadata=PLATFORM
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    # Another team's usage, its org's included, stays its own.
    await fails(
        quota.GetUsage(
            quota_pb2.QuotaServiceGetUsageRequest(tenant="globex"), metadata=ACME_MEMBER
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
