"""Quota use cases. Also the in-process `QuotaGate` the storage service charges through."""

from __future__ import annotations

from dataclasses import dataclass

from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.policy import PLATFORM_ADMIN_REQUIRED, Target
from engram.domain.ports import Authorizer, UsageReport
from engram.domain.principals import Action, Principal
from engram.domain.quotas import (
    INSTANCE,
    Counter,
    QuotaDefaults,
    aggregate_owner,
    counters_for,
    space_counter_key,
    validate_quota_bytes,
)
from engram.domain.spaces import SpaceRef
from engram.quota.ports import ChargeOutcome, StoredUsage, UsageLedger
from engram.runtime.ttl_cache import TtlCache

MAX_KEY_LENGTH = 200


@dataclass(frozen=True, slots=True)
class TenantUsage:
    tenant: str
    used_bytes: int
    quota_bytes: int
    overridden: bool


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

    # --- QuotaGate (called by storage with an already-authorized space) ----------------------

    async def charge(self, space: SpaceRef, delta_bytes: int, idempotency_key: str) -> None:
        """In process, a call runs once and is never re-sent, so its key needs no record
        (one write fewer per charge); the key matters to GrpcQuotaGate, whose retries of a
        Charge RPC reach `apply_charge` with the same key."""
        del idempotency_key
        await self._apply(space, delta_bytes, None)

    async def usage(self, space: SpaceRef) -> UsageReport:
        space_counter, aggregate = await self._counters(space)
        values = await self._ledger.read([space_counter.key, aggregate.key])
        return UsageReport(
            space_used_bytes=values[space_counter.key],
            space_quota_bytes=space_counter.limit or 0,
            aggregate_used_bytes=values[aggregate.key],
            aggregate_quota_bytes=aggregate.limit or 0,
        )

    async def document_count(self, space: SpaceRef) -> int:
        return (await self._stored.space_usage(space.id)).document_count

    # --- QuotaService RPCs -------------------------------------------------------------------

    async def apply_charge(
        self, space: SpaceRef, delta_bytes: int, idempotency_key: str
    ) -> ChargeOutcome:
        if not idempotency_key or len(idempotency_key) > MAX_KEY_LENGTH:
            raise InvalidArgument(
                f"idempotency_key is required (at most {MAX_KEY_LENGTH} characters)",
                field="idempotency_key",
            )
        return await self._apply(space, delta_bytes, idempotency_key)

    async def _apply(
        self, space: SpaceRef, delta_bytes: int, idempotency_key: str | None
    ) -> ChargeOutcome:
        counters = await self._counters(space)
        return await self._ledger.apply(
            aggregate_owner(space), counters, delta_bytes, idempotency_key
        )

    async def tenant_usage(self, principal: Principal, tenant: str) -> TenantUsage:
        owner = await self._visible_tenant(principal, tenant)
        override = await self._override(owner)
        default = (
            self._defaults.instance_total if owner == INSTANCE else (self._defaults.tenant_total)
        )
        key = INSTANCE if owner == INSTANCE else f"tenant:{owner}"
        used = (await self._ledger.read([key]))[key]
        return TenantUsage(
            tenant=owner,
            used_bytes=used,
            quota_bytes=default if override is None else override,
            overridden=override is not None,
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
        recorded = await self._ledger.counters_of(owner)
        aggregate_key = INSTANCE if owner == INSTANCE else f"tenant:{owner}"
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
        return ReconcileReport(drifts=drifts, spaces_checked=len(actual_by_space))

    # --- helpers -----------------------------------------------------------------------------

    async def _override(self, owner: str) -> int | None:
        cached = self._overrides.get(owner)
        if cached is None:
            cached = (await self._ledger.get_override(owner),)
            self._overrides.put(owner, cached)
        return cached[0]

    async def _counters(self, space: SpaceRef) -> tuple[Counter, Counter]:
        override = await self._override(aggregate_owner(space))
        return counters_for(space, self._defaults, override)

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
