"""The maintenance worker's pure rules: when a job is due, which settings an admin may give,
and how a maintenance RPC is authorized by its policy row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.maintenance import LogRetention, SpaceSettings
from engram.domain.maintenance_rules import LastRuns, is_due, lease_key, space_settings
from engram.domain.policy import decide
from engram.domain.principals import MAINTENANCE, Action, Principal, Role
from engram.domain.spaces import SpaceRef, Visibility

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
RETRY = timedelta(minutes=15)


def test_a_job_never_run_is_due() -> None:
    assert is_due(NOW, DAY, LastRuns(), RETRY)


def test_a_job_is_due_again_one_interval_after_its_last_success() -> None:
    last = LastRuns(succeeded_at=NOW - DAY + timedelta(seconds=1))
    assert not is_due(NOW, DAY, last, RETRY)
    assert is_due(NOW, DAY, LastRuns(succeeded_at=NOW - DAY), RETRY)


def test_after_a_failure_the_job_waits_the_retry_delay_not_a_whole_interval() -> None:
    failed = LastRuns(succeeded_at=NOW - 3 * DAY, failed_at=NOW - timedelta(minutes=5))
    assert not is_due(NOW, DAY, failed, RETRY)
    assert is_due(NOW + timedelta(minutes=10), DAY, failed, RETRY)
    never_succeeded = LastRuns(failed_at=NOW - timedelta(minutes=20))
    assert is_due(NOW, DAY, never_succeeded, RETRY)
    # A job whose interval is shorter than the retry delay retries on its interval.
    assert is_due(NOW, timedelta(minutes=1), LastRuns(failed_at=NOW - timedelta(minutes=2)), RETRY)


def test_a_success_after_a_failure_counts_from_the_success() -> None:
    last = LastRuns(succeeded_at=NOW - timedelta(hours=1), failed_at=NOW - timedelta(hours=2))
    assert not is_due(NOW, DAY, last, RETRY)


def test_one_lease_per_job_and_space() -> None:
    assert lease_key("dream", "v1:private:acme::::notes") != lease_key(
        "log_retention", "v1:private:acme::::notes"
    )


def test_settings_zero_means_the_default_and_out_of_range_is_refused() -> None:
    chosen = space_settings(
        dream_enabled=True,
        log_retention=LogRetention.DELETE,
        max_daily_logs=0,
        log_retention_days=0,
        stale_after_days=0,
    )
    assert chosen == SpaceSettings(dream_enabled=True, log_retention=LogRetention.DELETE)
    for field, value in (("max_daily_logs", -1), ("stale_after_days", 10**6)):
        values = {"max_daily_logs": 5, "log_retention_days": 0, "stale_after_days": 5}
        values[field] = value
        with pytest.raises(InvalidArgument) as raised:
            space_settings(dream_enabled=False, log_retention=LogRetention.OFF, **values)
        assert raised.value.field == f"settings.{field}"


SET = Action.SET_SPACE_MAINTENANCE
RUN = Action.RUN_JOB
GET = Action.GET_SPACE_MAINTENANCE
ADA = Principal("ada", "acme", Role.ADMIN)
ANN = Principal("ann", "acme", Role.MEMBER)
ROOT = Principal("root", "acme", Role.ADMIN, platform_admin=True)


def authorize(principal: Principal, action: Action, space: SpaceRef) -> SpaceRef:
    return decide(principal, action, space).require()


def _space(tenant: str = "") -> SpaceRef:
    return SpaceRef(Visibility.PRIVATE, tenant, "notes")


def test_tenant_admins_change_their_own_spaces_settings_and_members_do_not() -> None:
    assert authorize(ADA, SET, _space()) == SpaceRef.create(
        Visibility.PRIVATE, tenant="acme", name="notes"
    )
    with pytest.raises(PermissionDenied):
        authorize(ANN, SET, _space())
    assert authorize(ANN, GET, _space()).tenant == "acme", "members read them"


def test_another_tenants_space_needs_a_platform_admin_or_a_service() -> None:
    with pytest.raises(PermissionDenied):
        authorize(ADA, SET, _space("globex"))
    assert authorize(ROOT, SET, _space("globex")).tenant == "globex"
    assert authorize(MAINTENANCE, RUN, _space("globex")).tenant == "globex"
    with pytest.raises(PermissionDenied):
        authorize(MAINTENANCE, SET, _space("globex")), "a service never changes settings"
    with pytest.raises(PermissionDenied):
        authorize(MAINTENANCE, RUN, _space()), "a service names the tenant"


def test_maintenance_is_a_service_principal() -> None:
    assert MAINTENANCE.service and not MAINTENANCE.platform_admin and MAINTENANCE.tenant == ""
