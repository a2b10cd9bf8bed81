"""Authorization rules (ARCHITECTURE §2), decided in this one place.

Tenant and user always come from the identity: a request naming another tenant or user is
refused, never served. Reads need membership of the space's tenant (global spaces are
readable by everyone); mutations need role member or above; global mutations need
platform_admin and are audited.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

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


# --- the RPC policy table ----------------------------------------------------------------------
#
# Who may call each served RPC, by the target it names: a space or tenant of the caller's own
# tenant, of another tenant, a global space, or the whole instance (tenant "instance",
# Reindex{all}). Space rules are decided by `decide` above; the others by the services, with
# the same outcome. The server refuses to start with an RPC that has no row, and the
# authorization-matrix test checks every row over gRPC for every role.


class Target(StrEnum):
    OWN = "own"
    OTHER = "other"
    GLOBAL = "global"
    INSTANCE = "instance"


class Who(StrEnum):
    # The request carries the credential to check: no principal needed.
    CREDENTIAL = "credential"
    ANYONE = "anyone"
    # Any role in the target's tenant (services act for every tenant).
    TENANT_MEMBER = "tenant_member"
    # Role member or above in the target's tenant, or a service.
    TENANT_WRITER = "tenant_writer"
    # Role admin in the target's tenant, or a platform admin (never a service).
    TENANT_ADMIN = "tenant_admin"
    TENANT_ADMIN_OR_SERVICE = "tenant_admin_or_service"
    # Role org_admin in a team of the target org, or a platform admin (never a service).
    ORG_ADMIN = "org_admin"
    PLATFORM_ADMIN = "platform_admin"
    PLATFORM_ADMIN_OR_SERVICE = "platform_admin_or_service"
    SERVICE = "service"
    NOBODY = "nobody"


def admits(who: Who, principal: Principal | None, target: Target) -> bool:
    """Whether `principal` passes `who` for `target` (the table's meaning, for tests and
    for the services that decide outside `decide`)."""
    if who is Who.CREDENTIAL:
        return True
    if principal is None or who is Who.NOBODY:
        return False
    own = target is Target.OWN
    if who is Who.ANYONE:
        return True
    if who is Who.TENANT_MEMBER:
        return principal.service or own
    if who is Who.TENANT_WRITER:
        return principal.service or (own and principal.role >= Role.MEMBER)
    if who is Who.TENANT_ADMIN:
        return not principal.service and (
            principal.platform_admin or (own and principal.role >= Role.ADMIN)
        )
    if who is Who.TENANT_ADMIN_OR_SERVICE:
        return principal.service or admits(Who.TENANT_ADMIN, principal, target)
    if who is Who.ORG_ADMIN:
        return not principal.service and (
            principal.platform_admin or (own and principal.role >= Role.ORG_ADMIN)
        )
    if who is Who.PLATFORM_ADMIN:
        return principal.platform_admin
    if who is Who.PLATFORM_ADMIN_OR_SERVICE:
        return principal.platform_admin or principal.service
    return principal.service  # Who.SERVICE


_READ = {Target.OWN: Who.TENANT_MEMBER, Target.OTHER: Who.TENANT_MEMBER, Target.GLOBAL: Who.ANYONE}
_MUTATE = {
    Target.OWN: Who.TENANT_WRITER,
    Target.OTHER: Who.TENANT_WRITER,
    Target.GLOBAL: Who.PLATFORM_ADMIN,
}

# Tenant admins of the space's tenant, platform admins anywhere; never a service.
_ERASE = {
    Target.OWN: Who.TENANT_ADMIN,
    Target.OTHER: Who.TENANT_ADMIN,
    Target.GLOBAL: Who.PLATFORM_ADMIN,
}


def _every(who: Who, targets: tuple[Target, ...] = (Target.OWN,)) -> dict[Target, Who]:
    return dict.fromkeys(targets, who)


RPC_POLICY: dict[str, dict[Target, Who]] = {
    "/engram.v1.StorageService/ReadDocument": _READ,
    "/engram.v1.StorageService/ListDocuments": _READ,
    "/engram.v1.StorageService/ListDocumentVersions": _READ,
    "/engram.v1.StorageService/GetUsage": _READ,
    "/engram.v1.StorageService/ExportSpace": _READ,
    "/engram.v1.StorageService/WriteDocument": _MUTATE,
    "/engram.v1.StorageService/DeleteDocument": _MUTATE,
    "/engram.v1.StorageService/ImportSpace": _MUTATE,
    # Erasing for good (no version kept) is an admin's call, never a service's.
    "/engram.v1.StorageService/PurgeDocument": _ERASE,
    "/engram.v1.StorageService/DeleteSpace": _ERASE,
    "/engram.v1.StorageService/ListSpaces": {
        Target.OWN: Who.TENANT_MEMBER,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.GLOBAL: Who.ANYONE,
    },
    "/engram.v1.StorageService/WatchSpace": _READ,
    "/engram.v1.MaintenanceService/ListJobRuns": {
        **_READ,
        Target.INSTANCE: Who.PLATFORM_ADMIN,
    },
    "/engram.v1.MaintenanceService/RunJob": {
        Target.OWN: Who.TENANT_ADMIN_OR_SERVICE,
        Target.OTHER: Who.TENANT_ADMIN_OR_SERVICE,
        Target.GLOBAL: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    "/engram.v1.MaintenanceService/GetSpaceMaintenance": _READ,
    "/engram.v1.MaintenanceService/SetSpaceMaintenance": _ERASE,
    "/engram.v1.SearchService/Search": _READ,
    "/engram.v1.WorkspaceService/MemoryRead": _READ,
    "/engram.v1.WorkspaceService/MemoryTree": _READ,
    "/engram.v1.WorkspaceService/MemorySearch": _READ,
    # Assembling records the agent's SOUL.md baseline, not a document: a read.
    "/engram.v1.WorkspaceService/GetSystemPrompt": _READ,
    "/engram.v1.WorkspaceService/MemoryWrite": _MUTATE,
    "/engram.v1.WorkspaceService/AppendDailyLog": _MUTATE,
    "/engram.v1.WorkspaceService/SeedWorkspace": _MUTATE,
    "/engram.v1.WorkspaceService/CompleteBootstrap": _MUTATE,
    "/engram.v1.IndexerService/Reindex": {
        **_MUTATE,
        Target.INSTANCE: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    "/engram.v1.IndexerService/GetIndexStatus": _every(Who.ANYONE),
    "/engram.v1.QuotaService/Charge": {
        Target.OWN: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.OTHER: Who.SERVICE,
        Target.GLOBAL: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    "/engram.v1.QuotaService/GetUsage": {
        Target.OWN: Who.TENANT_MEMBER,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.INSTANCE: Who.ANYONE,
    },
    "/engram.v1.QuotaService/SetTenantQuota": _every(
        Who.PLATFORM_ADMIN, (Target.OWN, Target.OTHER, Target.INSTANCE)
    ),
    "/engram.v1.QuotaService/Reconcile": {
        Target.OWN: Who.TENANT_ADMIN_OR_SERVICE,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.INSTANCE: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    # An org's ceiling: OWN is the org of the caller's own team, OTHER any other org.
    "/engram.v1.QuotaService/SetOrgQuota": {
        Target.OWN: Who.ORG_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    # Which org a team belongs to binds it to that org's ceiling: the operator's call.
    "/engram.v1.QuotaService/SetTenantOrg": _every(Who.PLATFORM_ADMIN, (Target.OWN, Target.OTHER)),
    "/engram.v1.AuthzService/Authenticate": _every(Who.CREDENTIAL),
    "/engram.v1.AuthzService/Authorize": _every(Who.ANYONE),
    # A token for oneself; one for another user or tenant acts as them and needs
    # ENGRAM_ALLOW_ACT_AS (off by default, so: nobody).
    "/engram.v1.AuthzService/CreateToken": {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.NOBODY,
    },
    "/engram.v1.AuthzService/RevokeToken": {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    # The tenant's tokens (never their secrets): who holds which role until when.
    "/engram.v1.AuthzService/ListTokens": {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    "/engram.v1.AuthzService/ListAuditEvents": _every(Who.PLATFORM_ADMIN),
    "/engram.v1.AuthzService/RecordAuditEvent": _every(Who.SERVICE),
}


def unlisted_methods(methods: Iterable[str]) -> list[str]:
    """The served methods (`/package.Service/Method`) with no row in RPC_POLICY."""
    return [method for method in methods if method not in RPC_POLICY]


def rpc_target(principal: Principal, requested: SpaceRef) -> Target:
    """Which column of a row applies to a call naming `requested`."""
    if requested.visibility is Visibility.GLOBAL:
        return Target.GLOBAL
    if requested.tenant and requested.tenant != principal.tenant:
        return Target.OTHER
    return Target.OWN


def authorize_rpc(principal: Principal, rpc: str, requested: SpaceRef) -> SpaceRef:
    """Decides a space-targeted RPC by its row in RPC_POLICY (for services whose rules are
    not `decide`'s read/mutate split, e.g. tenant admins, or platform admins naming another
    tenant's space). Returns the stamped space or raises PermissionDenied.

    Raises InvalidSpaceRef when the ref breaks a SpaceRef rule.
    """
    target = rpc_target(principal, requested)
    who = RPC_POLICY[rpc].get(target, Who.NOBODY)
    if target is Target.OTHER and not principal.service:
        if not admits(who, principal, target):
            return _deny(
                TENANT_MISMATCH,
                "the space names another tenant; leave space.tenant empty to use your own",
            ).require()
        # A platform admin acting on another tenant's space: the ref is taken as named.
        validate_space_ref(requested)
        return requested
    stamped = stamp(principal, requested)
    if isinstance(stamped, Decision):
        return stamped.require()
    if not admits(who, principal, target):
        name = rpc.rsplit("/", 1)[-1]
        rule = PLATFORM_ADMIN_REQUIRED if target is Target.GLOBAL else "admin_role_required"
        raise PermissionDenied(f"{name} needs {_WHO_TEXT.get(who, who.value)}", rule=rule)
    validate_space_ref(stamped)
    return stamped


_WHO_TEXT = {
    Who.TENANT_MEMBER: "membership of the space's tenant",
    Who.TENANT_ADMIN: "role admin in the space's tenant (or a platform admin)",
    Who.TENANT_ADMIN_OR_SERVICE: "role admin in the space's tenant, a platform admin or a service",
    Who.PLATFORM_ADMIN: "a platform admin",
    Who.PLATFORM_ADMIN_OR_SERVICE: "a platform admin or a service",
}
