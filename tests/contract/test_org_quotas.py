"""Org quotas (seed 003) over gRPC on SQLite and MongoDB: an org groups teams (tenants) under
one ceiling set by its org admin; each team's effective quota is the lesser of its own and
the org's, teams put in the org later included; racing writers of two teams never pass the
ceiling together; global writes meet the instance total and are attributed to the writing
team without counting towards its quota."""

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
    QuotaUsage,
    Space,
)
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, refused, secure_deployment
from tests.support.tokens import mint, service_token

pytestmark = pytest.mark.contract

SERVICE = service_token("storage")
ACME_MEMBER = mint("ann", "acme", "member")
ACME_ADMIN = mint("ada", "acme", "admin")
ACME_ORG_ADMIN = mint("olga", "acme", "org_admin")
GLOBEX_MEMBER = mint("gus", "globex", "member")
GLOBEX_ORG_ADMIN = mint("gia", "globex", "org_admin")
HOOLI_MEMBER = mint("hal", "hooli", "member")
PLATFORM = mint("root", "acme", "admin", platform_admin=True)
GLOBEX_PLATFORM = mint("groot", "globex", "admin", platform_admin=True)
# Storage (another process on MongoDB) reads memberships and ceilings through a 2 s cache.
CACHE_SECONDS = 2.1
NOTES = Space(name="notes")
GLOBAL = Space("global", "handbook")


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


def storage(deployment: Deployment, who: str) -> AsyncClient:
    # retries=0: every refusal (and every racer's answer) is the first attempt's. A deadline
    # of 120 s, not the client's 30: 200 racers at once on FerretDB took longer than 30 s
    # with CI's three sessions on two cores, and the ceiling, not the latency, is tested.
    return deployment.client("storage", who).with_options(retries=0, space=NOTES, timeout=120)


def quota(deployment: Deployment, who: str) -> AsyncClient:
    return deployment.client("quota", who).with_options(retries=0)


async def join(deployment: Deployment, tenant: str, org: str) -> int:
    joined = await quota(deployment, PLATFORM).set_tenant_org(tenant, org)
    return joined.org_used_bytes


async def usage(deployment: Deployment, who: str, tenant: str = "") -> QuotaUsage:
    return await quota(deployment, who).quota_usage(tenant=tenant)


async def test_racers_of_two_teams_never_pass_their_org_ceiling(deployment: Deployment) -> None:
    await join(deployment, "acme", "initech")
    await join(deployment, "globex", "initech")
    # The org admin of acme sets the ceiling of acme's org (empty org = the caller's).
    assert await quota(deployment, ACME_ORG_ADMIN).set_org_quota(1000) == 1000
    await asyncio.sleep(CACHE_SECONDS)
    writers = {who: storage(deployment, who) for who in (ACME_MEMBER, GLOBEX_MEMBER)}

    async def racer(i: int) -> bool:
        who = ACME_MEMBER if i % 2 else GLOBEX_MEMBER
        try:
            await writers[who].write_document(f"r/{i}.md", "x" * 10)
        except QuotaExceeded as error:
            assert "org_ceiling quota exceeded for initech" in error.message
            return False
        return True

    landed = await asyncio.gather(*(racer(i) for i in range(200)))
    assert landed.count(True) == 100, "exactly the writes that fit the ceiling land, no more"
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert acme.org == globex.org == "initech"
    assert acme.org_used_bytes == globex.org_used_bytes == 1000
    assert acme.tenant_used_bytes + globex.tenant_used_bytes == 1000
    assert acme.org_quota_bytes == 1000
    # Each team's effective quota: the lesser of its own (1 GiB by default) and the ceiling.
    assert acme.tenant_quota_bytes == 1 << 30 and acme.tenant_effective_quota_bytes == 1000
    # The counters agree with the documents stored: nothing to correct.
    for admin in (ACME_ADMIN, mint("gil", "globex", "admin")):
        assert (await quota(deployment, admin).reconcile()).drifts == ()
    # StorageService's usage reports the effective quota as the tenant's limit.
    du = await storage(deployment, ACME_MEMBER).get_usage()
    assert du.tenant_quota_bytes == 1000


async def test_a_team_put_in_an_org_later_is_bound_by_its_ceiling(
    deployment: Deployment,
) -> None:
    platform, hal = quota(deployment, PLATFORM), storage(deployment, HOOLI_MEMBER)
    # The ceiling is set on an org with no team yet (a platform admin names any org) ...
    await platform.set_org_quota(300, org="umbrella")
    # ... and hooli, which already holds 120 bytes, joins it afterwards: its bytes come along.
    await hal.write_document("old.md", "h" * 120)
    assert await join(deployment, "hooli", "umbrella") == 120
    await asyncio.sleep(CACHE_SECONDS)
    shown = await usage(deployment, HOOLI_MEMBER)
    assert (shown.org, shown.org_used_bytes, shown.org_quota_bytes) == ("umbrella", 120, 300)
    assert shown.tenant_effective_quota_bytes == 300
    await hal.write_document("new.md", "h" * 180)
    failure = await refused(hal.write_document("one.md", "h"), QuotaExceeded, "QUOTA_EXCEEDED")
    assert failure.metadata == {
        "limit": "org_ceiling",
        "limit_bytes": "300",
        "used_bytes": "300",
        "requested_bytes": "1",
    }
    # The lesser of the two: a team whose own quota is below the ceiling meets its own.
    await platform.set_tenant_quota("hooli", 250)
    await platform.set_org_quota(10_000, org="umbrella")
    await asyncio.sleep(CACHE_SECONDS)
    assert (await usage(deployment, HOOLI_MEMBER)).tenant_effective_quota_bytes == 250
    failure = await refused(hal.write_document("one.md", "h"), QuotaExceeded)
    assert failure.limit == "tenant_total"
    # A charge never followed by a write drifts the org's counter too; Reconcile fixes both.
    await quota(deployment, SERVICE).charge(
        -50, idempotency_key="x", space=Space(name="notes", tenant="hooli")
    )
    fixed = await quota(deployment, mint("hap", "hooli", "admin")).reconcile()
    assert sorted((d.counter, d.recorded_bytes, d.actual_bytes) for d in fixed.drifts) == [
        ("org:umbrella", 250, 300),
        ("space:v1:private:hooli::::notes", 250, 300),
        ("tenant:hooli", 250, 300),
    ]
    # Leaving the org takes the team's bytes out of the org's counter and frees it.
    assert await join(deployment, "hooli", "") == 0
    left = await usage(deployment, HOOLI_MEMBER)
    assert (left.org, left.org_quota_bytes, left.tenant_effective_quota_bytes) == ("", None, 250)


async def test_global_writes_meet_the_instance_and_are_attributed_to_the_writer(
    deployment: Deployment,
) -> None:
    platform = quota(deployment, PLATFORM)
    root = storage(deployment, PLATFORM).with_options(space=GLOBAL)
    groot = storage(deployment, GLOBEX_PLATFORM).with_options(space=GLOBAL)
    await platform.set_tenant_quota("instance", 600)
    # Attribution only: a team with no room of its own still writes global spaces.
    await platform.set_tenant_quota("acme", 0)
    await asyncio.sleep(CACHE_SECONDS)
    await root.write_document("a.md", "a" * 300)
    await groot.write_document("g.md", "g" * 200)
    failure = await refused(root.write_document("b.md", "b" * 101), QuotaExceeded)
    assert failure.limit == "instance_total"
    instance = await usage(deployment, ACME_MEMBER, "instance")
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert instance.tenant_used_bytes == 500
    assert (acme.global_attributed_bytes, globex.global_attributed_bytes) == (300, 200)
    assert acme.tenant_used_bytes == globex.tenant_used_bytes == 0, "not the team's quota"
    # Shrinking and deleting move the instance and the changer's attribution together.
    await root.write_document("a.md", "a" * 100)
    await groot.delete_document("g.md")
    instance = await usage(deployment, ACME_MEMBER, "instance")
    acme, globex = await usage(deployment, ACME_MEMBER), await usage(deployment, GLOBEX_MEMBER)
    assert instance.tenant_used_bytes == 100
    assert (acme.global_attributed_bytes, globex.global_attributed_bytes) == (100, 0)
    # Reconciling the instance recounts stored bytes and leaves attribution alone.
    clean = await platform.reconcile("instance")
    assert clean.drifts == ()
    assert (await usage(deployment, ACME_MEMBER)).global_attributed_bytes == 100


async def test_who_sets_ceilings_and_memberships(deployment: Deployment) -> None:
    org_admin, platform = quota(deployment, ACME_ORG_ADMIN), quota(deployment, PLATFORM)
    # An org admin of a team in no org has no org to set.
    await refused(org_admin.set_org_quota(1000), InvalidArgument)
    await join(deployment, "acme", "initech")
    await join(deployment, "globex", "cyberdyne")
    # Team admins are not org admins; an org admin of another org's team is not this one's.
    await refused(
        quota(deployment, ACME_ADMIN).set_org_quota(1000, org="initech"),
        PermissionDenied,
        "ORG_ADMIN_REQUIRED",
    )
    await refused(
        quota(deployment, GLOBEX_ORG_ADMIN).set_org_quota(1000, org="initech"),
        PermissionDenied,
        "PLATFORM_ADMIN_REQUIRED",
    )
    assert await org_admin.set_org_quota(1000, org="initech") == 1000
    assert (await usage(deployment, ACME_MEMBER)).org_quota_bytes == 1000
    # Membership binds a team to a ceiling: platform admins only, org admins included.
    await refused(org_admin.set_tenant_org("globex", "initech"), PermissionDenied)
    for org, size in (("initech", -1), ("a:b", 1000), ("../x", 1000)):
        await refused(platform.set_org_quota(size, org=org), InvalidArgument)
    for tenant, org in (("", "initech"), ("instance", "initech"), ("acme", "a/b")):
        await refused(platform.set_tenant_org(tenant, org), InvalidArgument)
    # Another team's usage, its org's included, stays its own.
    await refused(quota(deployment, ACME_MEMBER).quota_usage(tenant="globex"), PermissionDenied)
