"""Quota use cases. Also the in-process `QuotaGate` the storage service charges through."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.policy import PLATFORM_ADMIN_REQUIRED, Target
from engram.domain.ports import Authorizer, UsageReport
from engram.domain.principals import Action, Principal
from engram.domain.quotas import (
    INSTANCE,
    QuotaDefaults,
    aggregate_owner,
    attribution_counter_key,
    charge_counters,
    counters_for,
    effective_quota,
    org_counter_key,
    space_counter_key,
    validate_quota_bytes,
)
from engram.domain.spaces import SpaceRef, name_problem
from engram.quota.orgs import OrgQuotas
from engram.quota.ports import StoredUsage, UsageLedger
from engram.runtime.ttl_cache import TtlCache

MAX_KEY_LENGTH = 200


@dataclass(frozen=True, slots=True)
class TenantUsage:
    tenant: str
    used_bytes: int
    quota_bytes: int
    overridden: bool
    # The lesser of quota_bytes and the org's ceiling.
    effective_quota_bytes: int
    org: str = ""
    org_used_bytes: int = 0
    # None: the org has no ceiling.
    org_quota_bytes: int | None = None
    # Bytes of global spaces the tenant's changes account for (attribution only).
    global_attributed_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Charged:
    # False when the idempotency key had already been applied.
    applied: bool
    space_used_bytes: int
    aggregate_used_bytes: int
    org_used_bytes: int


@dataclass(frozen=True, slots=True)
class Drift:
    counter: str
    recorded_bytes: int
    actual_bytes: int


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    drifts: list[Drift]
    spaces_checked: int


class QuotaService:
    def __init__(
        self,
        ledger: UsageLedger,
        defaults: QuotaDefaults,
        stored: StoredUsage,
        *,
        authorizer: Authorizer,
        override_cache_seconds: float = 2.0,
    ) -> None:
        self._authorizer = authorizer
        self._ledger = ledger
        self._defaults = defaults
        self._stored = stored
        # Every write needs its tenant's limit and overrides change rarely: an override set
        # in another process applies here within `override_cache_seconds`.
        self._overrides: TtlCache[str, tuple[int | None]] = TtlCache(
            ttl=override_cache_seconds, size=10_000
        )
        self.orgs = OrgQuotas(
            ledger, stored, authorizer=authorizer, cache_seconds=override_cache_seconds
        )

    # --- QuotaGate (called by storage with an already-authorized space) ----------------------

    async def charge(
        self,
        space: SpaceRef,
        delta_bytes: int,
        idempotency_key: str,
        *,
        attributed_tenant: str = "",
    ) -> None:
        """In process, a call runs once and is never re-sent, so its key needs no record
        (one write fewer per charge); the key matters to GrpcQuotaGate, whose retries of a
        Charge RPC reach `apply_charge` with the same key. `attributed_tenant`: for a
        global space, the tenant whose principal made the change (attribution only)."""
        del idempotency_key
        await self._apply(space, delta_bytes, None, attributed_tenant)

    async def usage(self, space: SpaceRef) -> UsageReport:
        """The space's figures and its aggregate's, the aggregate's limit being the
        tenant's effective quota (the lesser of its own and its org's ceiling)."""
        override = await self._override(aggregate_owner(space))
        space_counter, aggregate = counters_for(space, self._defaults, override)
        values = await self._ledger.read([space_counter.key, aggregate.key])
        limit = aggregate.limit or 0
        if not space.is_global:
            org = await self.orgs.limit_of(space.tenant)
            limit = effective_quota(limit, org.ceiling if org else None)
        return UsageReport(
            space_used_bytes=values[space_counter.key],
            space_quota_bytes=space_counter.limit or 0,
            aggregate_used_bytes=values[aggregate.key],
            aggregate_quota_bytes=limit,
        )

    async def document_count(self, space: SpaceRef) -> int:
        return (await self._stored.space_usage(space.id)).document_count

    # --- QuotaService RPCs -------------------------------------------------------------------

    async def apply_charge(
        self,
        space: SpaceRef,
        delta_bytes: int,
        idempotency_key: str,
        *,
        attributed_tenant: str = "",
    ) -> Charged:
        if not idempotency_key or len(idempotency_key) > MAX_KEY_LENGTH:
            raise InvalidArgument(
                f"idempotency_key is required (at most {MAX_KEY_LENGTH} characters)",
                field="idempotency_key",
            )
        problem = name_problem(attributed_tenant) if attributed_tenant else ""
        if problem or attributed_tenant == INSTANCE:
            raise InvalidArgument(
                f"attributed_tenant {problem or 'must name a team'}", field="attributed_tenant"
            )
        return await self._apply(space, delta_bytes, idempotency_key, attributed_tenant)

    async def _apply(
        self,
        space: SpaceRef,
        delta_bytes: int,
        idempotency_key: str | None,
        attributed_tenant: str = "",
    ) -> Charged:
        owner = aggregate_owner(space)
        # Both are cached briefly, so a tenant that writes less often than that pays for
        # them on most charges: the two reads go out together, one round trip instead of two.
        if space.is_global:
            org, override = None, await self._override(owner)
        else:
            org, override = await asyncio.gather(self.orgs.limit_of(owner), self._override(owner))
        counters = charge_counters(
            space,
            self._defaults,
            override,
            org=org.org if org else "",
            org_ceiling=org.ceiling if org else None,
            attributed_tenant=attributed_tenant,
        )
        outcome = await self._ledger.apply(owner, counters, delta_bytes, idempotency_key)
        return Charged(
            applied=outcome.applied,
            space_used_bytes=outcome.values.get(counters[0].key, 0),
            aggregate_used_bytes=outcome.values.get(counters[1].key, 0),
            org_used_bytes=outcome.values.get(org_counter_key(org.org), 0) if org else 0,
        )

    async def tenant_usage(self, principal: Principal, tenant: str) -> TenantUsage:
        owner = await self._visible_tenant(principal, tenant)
        override = await self._override(owner)
        default = (
            self._defaults.instance_total if owner == INSTANCE else (self._defaults.tenant_total)
        )
        quota = default if override is None else override
        if owner == INSTANCE:
            used = (await self._ledger.read([INSTANCE]))[INSTANCE]
            return TenantUsage(owner, used, quota, override is not None, quota)
        org = await self.orgs.limit_of(owner)
        keys = [f"tenant:{owner}", attribution_counter_key(owner)]
        if org:
            keys.append(org_counter_key(org.org))
        values = await self._ledger.read(keys)
        return TenantUsage(
            tenant=owner,
            used_bytes=values[keys[0]],
            quota_bytes=quota,
            overridden=override is not None,
            effective_quota_bytes=effective_quota(quota, org.ceiling if org else None),
            org=org.org if org else "",
            org_used_bytes=values[keys[2]] if org else 0,
            org_quota_bytes=org.ceiling if org else None,
            global_attributed_bytes=values[keys[1]],
        )

    async def set_tenant_quota(self, principal: Principal, tenant: str, quota_bytes: int) -> int:
        target = _tenant_target(principal, tenant or principal.tenant)
        if not await self._authorizer.permits(principal, Action.SET_TENANT_QUOTA, target):
            raise PermissionDenied(
                "setting a tenant's quota needs a platform admin", rule="platform_admin_required"
            )
        if not tenant:
            raise InvalidArgument(
                'tenant is required ("instance" for global spaces)', field="tenant"
            )
        validate_quota_bytes(quota_bytes)
        await self._ledger.set_override(tenant, quota_bytes)
        self._overrides.put(tenant, (quota_bytes,))
        return quota_bytes

    async def reconcile(self, principal: Principal, tenant: str) -> ReconcileReport:
        """Recomputes a tenant's counters from its stored documents, correcting drift."""
        owner = await self._visible_tenant(principal, tenant)
        target = _tenant_target(principal, owner)
        if not await self._authorizer.permits(principal, Action.RECONCILE, target):
            if target is Target.INSTANCE:
                raise PermissionDenied(
                    "reconciling the instance (global spaces) needs a platform admin",
                    rule=PLATFORM_ADMIN_REQUIRED,
                )
            raise PermissionDenied("reconcile needs a tenant admin", rule="admin_role_required")
        actual_by_space = await self._stored.usage_by_space(owner)
        aggregate_key = INSTANCE if owner == INSTANCE else f"tenant:{owner}"
        # Only the owner's space counters and its aggregate are recounted here: the org's
        # counter below, and attribution counters are records of who changed global
        # spaces, not of stored bytes.
        recorded = {
            key: value
            for key, value in (await self._ledger.counters_of(owner)).items()
            if key == aggregate_key or key.startswith("space:")
        }
        actual = {space_counter_key(space_id): used for space_id, used in actual_by_space.items()}
        actual[aggregate_key] = sum(actual_by_space.values())
        drifts = [
            Drift(counter=key, recorded_bytes=recorded.get(key, 0), actual_bytes=value)
            for key, value in sorted({**{k: 0 for k in recorded}, **actual}.items())
            if recorded.get(key, 0) != value
        ]
        if drifts:
            await self._ledger.overwrite(
                owner, {drift.counter: drift.actual_bytes for drift in drifts}
            )
        org = None if owner == INSTANCE else await self.orgs.count(owner)
        if org is not None and org.recorded_bytes != org.actual_bytes:
            await self.orgs.correct(org)
            drifts.append(Drift(org.key, org.recorded_bytes, org.actual_bytes))
        return ReconcileReport(drifts=drifts, spaces_checked=len(actual_by_space))

    # --- helpers -----------------------------------------------------------------------------

    async def _override(self, owner: str) -> int | None:
        cached = self._overrides.get(owner)
        if cached is None:
            cached = (await self._ledger.get_override(owner),)
            self._overrides.put(owner, cached)
        return cached[0]

    async def _visible_tenant(self, principal: Principal, tenant: str) -> str:
        owner = tenant or principal.tenant
        target = _tenant_target(principal, owner)
        if not await self._authorizer.permits(principal, Action.TENANT_USAGE, target):
            raise PermissionDenied(
                "you can only see your own tenant's usage", rule="tenant_mismatch"
            )
        return owner


def _tenant_target(principal: Principal, owner: str) -> Target:
    """The column of a tenant-targeted row: the instance, the caller's tenant, or another."""
    if owner == INSTANCE:
        return Target.INSTANCE
    return Target.OWN if owner == principal.tenant else Target.OTHER
