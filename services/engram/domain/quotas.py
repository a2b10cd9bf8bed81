"""Quota arithmetic (ARCHITECTURE §2): which counters a charge touches and their limits.

Usage is UTF-8 bytes of document contents. A charge applies to the space's counter and to
its aggregate: the tenant's, or for global spaces the instance's. A tenant that belongs to
an org also charges the org's counter, limited by the org's ceiling (so each team's
effective quota is the lesser of its own and the org's, and the org's teams together never
pass the ceiling). A change to a global space by a tenant's principal is also recorded on
that tenant's attribution counter, which has no limit. Growth is refused if any counter
would pass its limit; shrinking always succeeds and never goes below zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engram.domain.errors import InvalidArgument, QuotaExceeded
from engram.domain.spaces import RESERVED_TENANT, SpaceRef, Visibility, name_problem

INSTANCE = RESERVED_TENANT

SPACE_SUBCAP = "space_subcap"
TENANT_TOTAL = "tenant_total"
INSTANCE_TOTAL = "instance_total"
ORG_CEILING = "org_ceiling"
GLOBAL_ATTRIBUTION = "global_attribution"


@dataclass(frozen=True, slots=True)
class QuotaDefaults:
    """Configured limits; a per-tenant override replaces `tenant_total` for that tenant."""

    subcaps: Mapping[Visibility, int]
    tenant_total: int
    instance_total: int

    def space_cap(self, visibility: Visibility) -> int | None:
        """The sub-cap for a visibility; None = no sub-cap (global with 0)."""
        cap = self.subcaps[visibility]
        if visibility is Visibility.GLOBAL and cap == 0:
            return None
        return cap


@dataclass(frozen=True, slots=True)
class Counter:
    """One usage counter a charge touches, with its limit (None = unlimited)."""

    key: str
    limit_name: str
    limit: int | None
    subject: str


def space_counter_key(space_id: str) -> str:
    return f"space:{space_id}"


def aggregate_counter_key(space: SpaceRef) -> str:
    return INSTANCE if space.is_global else f"tenant:{space.tenant}"


def aggregate_owner(space: SpaceRef) -> str:
    """The tenant whose aggregate a space counts towards ("instance" for global spaces)."""
    return INSTANCE if space.is_global else space.tenant


def counters_for(
    space: SpaceRef, defaults: QuotaDefaults, aggregate_override: int | None
) -> tuple[Counter, Counter]:
    """The space counter and its aggregate counter, with the limits that apply."""
    if space.is_global:
        aggregate_limit = (
            defaults.instance_total if aggregate_override is None else (aggregate_override)
        )
        aggregate = Counter(INSTANCE, INSTANCE_TOTAL, aggregate_limit, INSTANCE)
    else:
        aggregate_limit = (
            defaults.tenant_total if aggregate_override is None else (aggregate_override)
        )
        aggregate = Counter(
            aggregate_counter_key(space), TENANT_TOTAL, aggregate_limit, space.tenant
        )
    space_counter = Counter(
        space_counter_key(space.id),
        SPACE_SUBCAP,
        defaults.space_cap(space.visibility),
        space.id,
    )
    return space_counter, aggregate


def org_counter_key(org: str) -> str:
    """The counter of an org's teams together; also the org ceiling's key among overrides
    (a tenant name cannot hold ':', so it never collides with a tenant's)."""
    return f"org:{org}"


def attribution_counter_key(tenant: str) -> str:
    """The bytes of global spaces a tenant's changes account for (attribution only)."""
    return f"global_by:{tenant}"


def is_attribution_key(key: str) -> bool:
    return key.startswith("global_by:")


def charge_counters(
    space: SpaceRef,
    defaults: QuotaDefaults,
    aggregate_override: int | None,
    *,
    org: str = "",
    org_ceiling: int | None = None,
    attributed_tenant: str = "",
) -> tuple[Counter, ...]:
    """Every counter a charge on `space` moves, in order: the space's, its aggregate's,
    then the org's (a tenant in `org`; limited by `org_ceiling`, None = no ceiling) or,
    for a global space changed by a tenant's principal, that tenant's attribution counter
    (never limited: the instance aggregate is what bounds global spaces)."""
    counters: tuple[Counter, ...] = counters_for(space, defaults, aggregate_override)
    if space.is_global:
        if attributed_tenant:
            counters += (
                Counter(
                    attribution_counter_key(attributed_tenant),
                    GLOBAL_ATTRIBUTION,
                    None,
                    attributed_tenant,
                ),
            )
    elif org:
        counters += (Counter(org_counter_key(org), ORG_CEILING, org_ceiling, org),)
    return counters


def effective_quota(own: int, org_ceiling: int | None) -> int:
    """A tenant's effective quota: the lesser of its own and its org's ceiling."""
    return own if org_ceiling is None else min(own, org_ceiling)


def validate_org(org: str, *, field: str = "org") -> None:
    """An org name follows a tenant's rules (non-empty, no separators, bounded)."""
    problem = "is required" if not org else name_problem(org)
    if problem:
        raise InvalidArgument(f"{field} {problem}", field=field)


def check_growth(counter: Counter, used: int, delta: int) -> None:
    """Raises QuotaExceeded if growing `counter` from `used` by `delta` passes its limit."""
    if delta <= 0 or counter.limit is None:
        return
    if used + delta > counter.limit:
        left = max(0, counter.limit - used)
        raise QuotaExceeded(
            f"{counter.limit_name} quota exceeded for {counter.subject}: limit {counter.limit} "
            f"bytes, {used} used, {left} left, this change needs {delta}; delete or shrink "
            "documents, or ask an admin for more",
            limit=counter.limit_name,
            subject=counter.subject,
            limit_bytes=counter.limit,
            used_bytes=used,
            requested_bytes=delta,
        )


def apply_delta(used: int, delta: int) -> int:
    """New counter value; shrinking never goes below zero."""
    return max(0, used + delta)


def validate_quota_bytes(quota_bytes: int) -> None:
    if quota_bytes < 0:
        raise InvalidArgument(
            f"quota_bytes must be 0 or positive, got {quota_bytes}", field="quota_bytes"
        )
