"""Authorization rules (ARCHITECTURE §2), decided by the pure policy."""

from __future__ import annotations

import pytest

from engram.domain.errors import InvalidSpaceRef, PermissionDenied
from engram.domain.policy import (
    MEMBER_ROLE_REQUIRED,
    PLATFORM_ADMIN_REQUIRED,
    SERVICE_TENANT_REQUIRED,
    TENANT_MISMATCH,
    USER_MISMATCH,
    decide,
)
from engram.domain.principals import Action, Principal, Role
from engram.domain.spaces import SpaceRef, Visibility

pytestmark = pytest.mark.unit

READS = [Action.READ, Action.LIST, Action.USAGE, Action.EXPORT, Action.SEARCH]
MUTATIONS = [Action.WRITE, Action.DELETE, Action.IMPORT]


def who(
    role: Role = Role.MEMBER,
    *,
    tenant: str = "acme",
    subject: str = "ann",
    admin: bool = False,
    service: bool = False,
) -> Principal:
    return Principal(
        subject=subject, tenant=tenant, role=role, platform_admin=admin, service=service
    )


def space(
    visibility: Visibility = Visibility.PRIVATE,
    *,
    tenant: str = "",
    user: str = "",
    project: str = "",
    bot: str = "",
) -> SpaceRef:
    return SpaceRef(visibility, tenant, "notes", project, bot, user)


@pytest.mark.parametrize("action", READS)
def test_viewers_read_their_tenant_and_tenant_is_stamped(action: Action) -> None:
    decision = decide(who(Role.VIEWER), action, space())
    assert decision.allowed
    assert decision.space == SpaceRef(Visibility.PRIVATE, "acme", "notes")


@pytest.mark.parametrize("action", MUTATIONS)
@pytest.mark.parametrize("role", [Role.VIEWER, Role.CONFIG_EDITOR])
def test_mutations_need_member(action: Action, role: Role) -> None:
    decision = decide(who(role), action, space())
    assert not decision.allowed and decision.rule == MEMBER_ROLE_REQUIRED
    with pytest.raises(PermissionDenied) as caught:
        decision.require()
    assert caught.value.rule == MEMBER_ROLE_REQUIRED


@pytest.mark.parametrize("action", MUTATIONS)
@pytest.mark.parametrize("role", [Role.MEMBER, Role.ADMIN])
def test_members_and_admins_mutate(action: Action, role: Role) -> None:
    assert decide(who(role), action, space()).allowed


@pytest.mark.parametrize("action", READS + MUTATIONS)
def test_another_tenant_is_refused_never_served(action: Action) -> None:
    decision = decide(who(Role.ADMIN, admin=True), action, space(tenant="globex"))
    assert not decision.allowed and decision.rule == TENANT_MISMATCH
    assert decision.space is None


def test_naming_your_own_tenant_is_fine() -> None:
    assert decide(who(), Action.READ, space(tenant="acme")).allowed


@pytest.mark.parametrize("action", READS + MUTATIONS)
def test_user_spaces_key_on_the_caller(action: Action) -> None:
    mine = decide(who(), action, space(Visibility.USER))
    assert mine.allowed and mine.space is not None and mine.space.user == "ann"
    theirs = decide(who(), action, space(Visibility.USER, user="bob"))
    assert not theirs.allowed and theirs.rule == USER_MISMATCH


def test_global_spaces_are_readable_by_everyone() -> None:
    decision = decide(who(Role.VIEWER, tenant="other"), Action.READ, space(Visibility.GLOBAL))
    assert decision.allowed and decision.space is not None and decision.space.tenant == ""


@pytest.mark.parametrize("action", MUTATIONS)
def test_global_mutations_need_platform_admin_and_are_audited(action: Action) -> None:
    refused = decide(who(Role.ADMIN), action, space(Visibility.GLOBAL))
    assert not refused.allowed and refused.rule == PLATFORM_ADMIN_REQUIRED
    allowed = decide(who(Role.ADMIN, admin=True), action, space(Visibility.GLOBAL))
    assert allowed.allowed and allowed.audit_action == f"memory.global_{action.value}"


def test_global_ref_naming_a_tenant_is_malformed() -> None:
    with pytest.raises(InvalidSpaceRef):
        decide(who(), Action.READ, space(Visibility.GLOBAL, tenant="acme"))


def test_service_principals_act_for_any_named_tenant() -> None:
    service = who(Role.VIEWER, tenant="", subject="indexer", service=True)
    decision = decide(service, Action.WRITE, space(tenant="globex"))
    assert decision.allowed and decision.space is not None and decision.space.tenant == "globex"
    missing = decide(service, Action.READ, space())
    assert not missing.allowed and missing.rule == SERVICE_TENANT_REQUIRED


def test_stamped_ref_is_still_validated() -> None:
    with pytest.raises(InvalidSpaceRef, match="space.bot is required"):
        decide(who(), Action.READ, space(Visibility.BOT, project="p"))
