"""Org quotas (seed 003): an org groups tenants (teams) under one ceiling.

Membership and the ceiling are stored apart from the tenants: the ceiling is the override
keyed `org:<org>` and membership one row per tenant, both read when a charge is made (cached
as briefly as tenant overrides), so a team put in an org after its ceiling was set is bound
by it from its first charge. An org's counter holds the bytes its teams use together; each
charge of a member moves it beside the space and tenant counters, atomically, so the teams
of an org never pass the ceiling together however many writers race.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.policy import PLATFORM_ADMIN_REQUIRED, Target
from engram.domain.ports import Authorizer
from engram.domain.principals import Action, Principal
from engram.domain.quotas import (
    INSTANCE,
    org_counter_key,
    validate_org,
    validate_quota_bytes,
)
from engram.domain.spaces import name_problem
from engram.quota.ports import StoredUsage, UsageLedger
from engram.runtime.ttl_cache import TtlCache

ORG_ADMIN_REQUIRED = "org_admin_required"


@dataclass(frozen=True, slots=True)
class OrgLimit:
    """A tenant's org and the org's ceiling (None: no ceiling set)."""

    org: str
    ceiling: int | None


@dataclass(frozen=True, slots=True)
class OrgCount:
    """An org's counter: what it records and what the stored documents hold."""

    key: str
    recorded_bytes: int
    actual_bytes: int


class OrgQuotas:
    def __init__(
        self,
        ledger: UsageLedger,
        stored: StoredUsage,
        *,
        authorizer: Authorizer,
        cache_seconds: float = 2.0,
    ) -> None:
        self._authorizer = authorizer
        self._ledger = ledger
        self._stored = stored
        # tenant -> (org,) and org -> (ceiling,): read on every charge, changed rarely; a
        # change made in another process applies here within `cache_seconds`.
        self._orgs: TtlCache[str, tuple[str | None]] = TtlCache(ttl=cache_seconds, size=10_000)
        self._ceilings: TtlCache[str, tuple[int | None]] = TtlCache(ttl=cache_seconds, size=10_000)

    async def limit_of(self, tenant: str) -> OrgLimit | None:
        """The tenant's org and its ceiling, or None for a tenant in no org."""
        org = await self._org(tenant)
        if org is None:
            return None
        return OrgLimit(org=org, ceiling=await self._ceiling(org))

    async def set_ceiling(self, principal: Principal, org: str, quota_bytes: int) -> str:
        """Sets an org's ceiling: an org admin of one of its teams, or a platform admin.
        An empty `org` is the caller's team's org. Returns the org."""
        own = await self._ledger.org_of(principal.tenant) if principal.tenant else None
        org = org or own or ""
        if not org:
            raise InvalidArgument(
                f"org is required: your team {principal.tenant!r} belongs to no org",
                field="org",
            )
        validate_org(org)
        # The action's row: OWN is the org of the caller's own team.
        target = Target.OWN if org == own else Target.OTHER
        if not await self._authorizer.permits(principal, Action.SET_ORG_QUOTA, target):
            if target is Target.OWN:
                raise PermissionDenied(
                    "setting your org's ceiling needs the org_admin role",
                    rule=ORG_ADMIN_REQUIRED,
                )
            raise PermissionDenied(
                f"org {org!r} is not your team's org; only platform admins set its ceiling",
                rule=PLATFORM_ADMIN_REQUIRED,
            )
        validate_quota_bytes(quota_bytes)
        await self._ledger.set_override(org_counter_key(org), quota_bytes)
        self._ceilings.put(org, (quota_bytes,))
        return org

    async def set_membership(self, principal: Principal, tenant: str, org: str) -> int:
        """Puts `tenant` in `org` (empty: out of its org); platform admins only. The orgs
        it leaves and joins are recounted from their teams' counters. Returns the bytes of
        the org it joined (0 for none)."""
        target = Target.OWN if tenant == principal.tenant else Target.OTHER
        if not await self._authorizer.permits(principal, Action.SET_TENANT_ORG, target):
            raise PermissionDenied(
                "which org a team belongs to is set by platform admins",
                rule=PLATFORM_ADMIN_REQUIRED,
            )
        problem = "is required" if not tenant else name_problem(tenant)
        if problem or tenant == INSTANCE:
            raise InvalidArgument(
                f"tenant {problem or 'must name a team, not the instance'}", field="tenant"
            )
        if org:
            validate_org(org)
        before = await self._ledger.org_of(tenant)
        await self._ledger.set_org(tenant, org or None)
        self._orgs.put(tenant, (org or None,))
        if before and before != org:
            await self._recount(before)
        return await self._recount(org) if org else 0

    async def count(self, tenant: str) -> OrgCount | None:
        """The counter of the tenant's org against its teams' stored documents (Reconcile)."""
        org = await self._ledger.org_of(tenant)
        if org is None:
            return None
        key = org_counter_key(org)
        actual = 0
        for member in await self._ledger.org_members(org):
            actual += sum((await self._stored.usage_by_space(member)).values())
        recorded = (await self._ledger.read([key]))[key]
        return OrgCount(key=key, recorded_bytes=recorded, actual_bytes=actual)

    async def correct(self, count: OrgCount) -> None:
        await self._ledger.overwrite(count.key, {count.key: count.actual_bytes})

    async def _recount(self, org: str) -> int:
        """Sets the org's counter to its teams' counters summed: a team joining brings its
        bytes, a team leaving takes them. A charge racing the move can leave the org's
        counter off by that charge until Reconcile."""
        keys = [f"tenant:{member}" for member in await self._ledger.org_members(org)]
        total = sum((await self._ledger.read(keys)).values()) if keys else 0
        key = org_counter_key(org)
        await self._ledger.overwrite(key, {key: total})
        return total

    async def _org(self, tenant: str) -> str | None:
        cached = self._orgs.get(tenant)
        if cached is None:
            cached = (await self._ledger.org_of(tenant),)
            self._orgs.put(tenant, cached)
        return cached[0]

    async def _ceiling(self, org: str) -> int | None:
        cached = self._ceilings.get(org)
        if cached is None:
            cached = (await self._ledger.get_override(org_counter_key(org)),)
            self._ceilings.put(org, cached)
        return cached[0]
