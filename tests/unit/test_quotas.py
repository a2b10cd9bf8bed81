"""Quota arithmetic: which counters a charge touches, limits, shrinking floors at zero."""

from __future__ import annotations

import pytest

from engram.domain.errors import InvalidArgument, QuotaExceeded
from engram.domain.quotas import (
    GLOBAL_ATTRIBUTION,
    INSTANCE,
    INSTANCE_TOTAL,
    ORG_CEILING,
    SPACE_SUBCAP,
    TENANT_TOTAL,
    QuotaDefaults,
    apply_delta,
    charge_counters,
    check_growth,
    counters_for,
    effective_quota,
    validate_org,
)
from engram.domain.spaces import SpaceRef, Visibility

pytestmark = pytest.mark.unit

MIB = 1024 * 1024
DEFAULTS = QuotaDefaults(
    subcaps={
        Visibility.PRIVATE: 64 * MIB,
        Visibility.BOT: 256 * MIB,
        Visibility.PROJECT: 256 * MIB,
        Visibility.CROSS_PROJECT: 512 * MIB,
        Visibility.USER: 128 * MIB,
        Visibility.ORG: 1024 * MIB,
        Visibility.GLOBAL: 0,
    },
    tenant_total=1024 * MIB,
    instance_total=1024 * MIB,
)


def test_tenant_space_counts_towards_its_tenant() -> None:
    space = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="n")
    space_counter, aggregate = counters_for(space, DEFAULTS, None)
    assert space_counter.limit == 64 * MIB and space_counter.limit_name == SPACE_SUBCAP
    assert aggregate.key == "tenant:acme" and aggregate.limit_name == TENANT_TOTAL


def test_override_replaces_the_tenant_total() -> None:
    space = SpaceRef.create(Visibility.ORG, tenant="acme", name="n")
    _, aggregate = counters_for(space, DEFAULTS, 5)
    assert aggregate.limit == 5


def test_global_space_has_no_subcap_and_counts_towards_the_instance() -> None:
    space = SpaceRef.create(Visibility.GLOBAL, tenant="", name="n")
    space_counter, aggregate = counters_for(space, DEFAULTS, None)
    assert space_counter.limit is None
    assert aggregate.key == "instance" and aggregate.limit_name == INSTANCE_TOTAL


def test_growth_past_a_limit_is_refused_with_the_figures() -> None:
    space = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="n")
    space_counter, _ = counters_for(space, DEFAULTS, None)
    check_growth(space_counter, 64 * MIB - 10, 10)
    with pytest.raises(QuotaExceeded) as caught:
        check_growth(space_counter, 64 * MIB - 10, 11)
    error = caught.value
    assert error.limit == SPACE_SUBCAP and error.used_bytes == 64 * MIB - 10
    assert error.limit_bytes == 64 * MIB and error.requested_bytes == 11
    assert "10 left" in error.message


def test_zero_limit_refuses_any_growth_but_not_shrinking() -> None:
    space = SpaceRef.create(Visibility.ORG, tenant="acme", name="n")
    _, aggregate = counters_for(space, DEFAULTS, 0)
    with pytest.raises(QuotaExceeded):
        check_growth(aggregate, 0, 1)
    check_growth(aggregate, 100, -50)


def test_shrinking_floors_at_zero() -> None:
    assert apply_delta(10, -50) == 0
    assert apply_delta(10, 5) == 15


def test_a_tenant_in_an_org_also_charges_the_org_under_its_ceiling() -> None:
    space = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="n")
    counters = charge_counters(space, DEFAULTS, None, org="initech", org_ceiling=1000)
    assert [(c.key, c.limit_name, c.limit) for c in counters] == [
        (f"space:{space.id}", SPACE_SUBCAP, 64 * MIB),
        ("tenant:acme", TENANT_TOTAL, 1024 * MIB),
        ("org:initech", ORG_CEILING, 1000),
    ]
    with pytest.raises(QuotaExceeded) as refused:
        for counter in counters:
            check_growth(counter, 990, 11)
    assert refused.value.limit == ORG_CEILING
    # An org with no ceiling still counts its teams' bytes; outside an org, two counters.
    unlimited = charge_counters(space, DEFAULTS, None, org="initech")
    assert unlimited[-1].limit is None
    assert len(charge_counters(space, DEFAULTS, None, attributed_tenant="acme")) == 2


def test_a_global_change_is_attributed_to_its_tenant_without_a_limit() -> None:
    space = SpaceRef.create(Visibility.GLOBAL, tenant="", name="handbook")
    counters = charge_counters(space, DEFAULTS, 600, org="ignored", attributed_tenant="acme")
    assert [(c.key, c.limit_name, c.limit) for c in counters] == [
        (f"space:{space.id}", SPACE_SUBCAP, None),
        (INSTANCE, INSTANCE_TOTAL, 600),
        ("global_by:acme", GLOBAL_ATTRIBUTION, None),
    ]


@pytest.mark.parametrize(
    ("own", "ceiling", "effective"), [(500, None, 500), (500, 300, 300), (200, 300, 200)]
)
def test_effective_quota_is_the_lesser_of_own_and_org(
    own: int, ceiling: int | None, effective: int
) -> None:
    assert effective_quota(own, ceiling) == effective


@pytest.mark.parametrize("org", ["", "a:b", "a/b", "..", " x", "x\x00"])
def test_org_names_follow_tenant_rules(org: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        validate_org(org)
    assert refused.value.field == "org"
