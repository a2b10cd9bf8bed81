"""Authorization rules (ARCHITECTURE §2), decided in this one place.

Tenant and user always come from the identity: a request naming another tenant or user is
refused, never served. Reads need membership of the space's tenant (global spaces are
readable by everyone); mutations need role member or above; global mutations need
platform_admin and are audited.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.domain.errors import PermissionDenied
from engram.domain.principals import Action, Principal, Role
from engram.domain.spaces import SpaceRef, Visibility, validate_space_ref

TENANT_MISMATCH = "tenant_mismatch"
USER_MISMATCH = "user_mismatch"
MEMBER_ROLE_REQUIRED = "member_role_required"
PLATFORM_ADMIN_REQUIRED = "platform_admin_required"
SERVICE_TENANT_REQUIRED = "service_tenant_required"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    rule: str
    message: str
    # The space stamped with the caller's tenant and user (None when refused).
    space: SpaceRef | None
    # The audit action to record when the change succeeds (global mutations).
    audit_action: str = ""

    def require(self) -> SpaceRef:
        """Returns the stamped space, or raises PermissionDenied with the rule."""
        if not self.allowed or self.space is None:
            raise PermissionDenied(self.message, rule=self.rule)
        return self.space


def _deny(rule: str, message: str) -> Decision:
    return Decision(allowed=False, rule=rule, message=message, space=None)


def stamp(principal: Principal, requested: SpaceRef) -> SpaceRef | Decision:
    """Stamps tenant and user from the identity, or returns the refusal."""
    if requested.visibility is Visibility.GLOBAL:
        validate_space_ref(requested)  # a global ref naming a tenant or user is malformed
        return requested
    if principal.service:
        # Services act for any tenant but must say which one.
        if not requested.tenant:
            return _deny(SERVICE_TENANT_REQUIRED, "service principals must name the space's tenant")
        return requested.with_identity(tenant=requested.tenant, user=requested.user)
    if requested.tenant and requested.tenant != principal.tenant:
        return _deny(
            TENANT_MISMATCH,
            "the space names another tenant; leave space.tenant empty to use your own",
        )
    if (
        requested.visibility is Visibility.USER
        and requested.user
        and (requested.user != principal.subject)
    ):
        return _deny(
            USER_MISMATCH,
            "user spaces belong to their user; leave space.user empty to use your own",
        )
    return requested.with_identity(tenant=principal.tenant, user=principal.subject)


def decide(principal: Principal, action: Action, requested: SpaceRef) -> Decision:
    """Decides whether `principal` may perform `action` on the requested space.

    Raises InvalidSpaceRef when the stamped ref breaks a SpaceRef rule.
    """
    stamped = stamp(principal, requested)
    if isinstance(stamped, Decision):
        return stamped
    if not action.mutates:
        return Decision(allowed=True, rule="", message="", space=stamped)
    if stamped.is_global:
        if not principal.platform_admin:
            return _deny(PLATFORM_ADMIN_REQUIRED, "changing a global space needs a platform admin")
        return Decision(
            allowed=True,
            rule="",
            message="",
            space=stamped,
            audit_action=f"memory.global_{action.value}",
        )
    if not principal.service and principal.role < Role.MEMBER:
        return _deny(
            MEMBER_ROLE_REQUIRED,
            f"{action.value} needs role member or above; you are {principal.role.name.lower()}",
        )
    return Decision(allowed=True, rule="", message="", space=stamped)
