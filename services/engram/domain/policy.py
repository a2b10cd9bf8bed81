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
ADMIN_ROLE_REQUIRED = "admin_role_required"
SERVICE_PRINCIPAL_REQUIRED = "service_principal_required"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    rule: str
    message: str
    # The space stamped with the caller's tenant and user (None when refused).
    space: SpaceRef | None
    # The audit action to record when the change succeeds (global mutations).
    audit_action: str = ""
    # The space as the caller named it, not stamped: a platform admin (or a service) acting
    # on another tenant's space where its row allows that.
    as_named: bool = False

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
    """Decides whether `principal` may perform `action` on the requested space: by the
    read/mutate rules, the erasure rule, or the action's row in ACTION_POLICY.

    Raises InvalidSpaceRef when the stamped ref breaks a SpaceRef rule.
    """
    if action in (Action.PURGE, Action.DELETE_SPACE):
        return _decide_erasure(principal, action, requested)
    if not action.by_space_rules:
        return _decide_by_row(principal, action, requested)
    return _decide_by_space_rules(principal, action, requested)


def _decide_by_space_rules(principal: Principal, action: Action, requested: SpaceRef) -> Decision:
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


# --- the policy table ---------------------------------------------------------------------------
#
# Who may take each action, by the target it names: a space or tenant of the caller's own
# tenant, of another tenant, a global space, or the whole instance (tenant "instance",
# Reindex{all}). Space rules are decided by `decide` above; the others by their rows, with the
# same outcome. Use cases ask about actions; which RPC takes which action is the edge's table
# (RPC_ACTIONS below): the server refuses to start with an RPC that has no row, and the
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


ACTION_POLICY: dict[Action, dict[Target, Who]] = {
    Action.READ: _READ,
    Action.LIST: _READ,
    Action.USAGE: _READ,
    Action.EXPORT: _READ,
    Action.SEARCH: _READ,
    Action.WRITE: _MUTATE,
    Action.DELETE: _MUTATE,
    Action.IMPORT: _MUTATE,
    # Erasing for good (no version kept) is an admin's call, never a service's.
    Action.PURGE: _ERASE,
    Action.DELETE_SPACE: _ERASE,
    Action.LIST_SPACES: {
        Target.OWN: Who.TENANT_MEMBER,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.GLOBAL: Who.ANYONE,
    },
    Action.LIST_JOB_RUNS: {
        **_READ,
        Target.INSTANCE: Who.PLATFORM_ADMIN,
    },
    Action.RUN_JOB: {
        Target.OWN: Who.TENANT_ADMIN_OR_SERVICE,
        Target.OTHER: Who.TENANT_ADMIN_OR_SERVICE,
        Target.GLOBAL: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    Action.GET_SPACE_MAINTENANCE: _READ,
    Action.SET_SPACE_MAINTENANCE: _ERASE,
    Action.REINDEX: {
        **_MUTATE,
        Target.INSTANCE: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    Action.INDEX_STATUS: _every(Who.ANYONE),
    # Across tenants, for engram's own services only: search asks the indexer's progress,
    # the indexer lists storage's documents.
    Action.INDEX_PROGRESS: _every(Who.SERVICE, (Target.INSTANCE,)),
    Action.LIST_ALL_DOCUMENTS: _every(Who.SERVICE, (Target.INSTANCE,)),
    Action.CHARGE: {
        Target.OWN: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.OTHER: Who.SERVICE,
        Target.GLOBAL: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    Action.TENANT_USAGE: {
        Target.OWN: Who.TENANT_MEMBER,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.INSTANCE: Who.ANYONE,
    },
    Action.SET_TENANT_QUOTA: _every(
        Who.PLATFORM_ADMIN, (Target.OWN, Target.OTHER, Target.INSTANCE)
    ),
    Action.RECONCILE: {
        Target.OWN: Who.TENANT_ADMIN_OR_SERVICE,
        Target.OTHER: Who.PLATFORM_ADMIN_OR_SERVICE,
        Target.INSTANCE: Who.PLATFORM_ADMIN_OR_SERVICE,
    },
    # An org's ceiling: OWN is the org of the caller's own team, OTHER any other org.
    Action.SET_ORG_QUOTA: {
        Target.OWN: Who.ORG_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    # Which org a team belongs to binds it to that org's ceiling: the operator's call.
    Action.SET_TENANT_ORG: _every(Who.PLATFORM_ADMIN, (Target.OWN, Target.OTHER)),
    Action.AUTHENTICATE: _every(Who.CREDENTIAL),
    Action.AUTHORIZE: _every(Who.ANYONE),
    # A token for oneself; one for another user or tenant acts as them and needs
    # ENGRAM_ALLOW_ACT_AS (off by default, so: nobody).
    Action.CREATE_TOKEN: {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.NOBODY,
    },
    Action.REVOKE_TOKEN: {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    # The tenant's tokens (never their secrets): who holds which role until when.
    Action.LIST_TOKENS: {
        Target.OWN: Who.TENANT_ADMIN,
        Target.OTHER: Who.PLATFORM_ADMIN,
    },
    Action.LIST_AUDIT_EVENTS: _every(Who.PLATFORM_ADMIN),
    Action.RECORD_AUDIT_EVENT: _every(Who.SERVICE),
    # What other services need of storage's documents (quota's usage reports, the
    # maintenance worker's walk, scans and pruning): services only, any tenant's.
    Action.STORED_USAGE: _every(Who.SERVICE, (Target.OWN, Target.OTHER, Target.GLOBAL)),
    Action.PRUNE_VERSIONS: _every(Who.SERVICE, (Target.OWN, Target.OTHER, Target.GLOBAL)),
    Action.LIST_ALL_SPACES: _every(Who.SERVICE, (Target.INSTANCE,)),
    Action.SCAN_DOCUMENTS: _every(Who.SERVICE, (Target.OWN, Target.OTHER, Target.GLOBAL)),
}

# The edge's table: the action each served RPC takes. Only the server's start-up check and
# the authorization matrix read it (through RPC_POLICY); a use case never names an RPC.
RPC_ACTIONS: dict[str, Action] = {
    "/engram.v1.StorageService/ReadDocument": Action.READ,
    "/engram.v1.StorageService/ListDocuments": Action.LIST,
    "/engram.v1.StorageService/ListDocumentVersions": Action.READ,
    "/engram.v1.StorageService/GetUsage": Action.USAGE,
    "/engram.v1.StorageService/ExportSpace": Action.EXPORT,
    "/engram.v1.StorageService/WriteDocument": Action.WRITE,
    "/engram.v1.StorageService/DeleteDocument": Action.DELETE,
    "/engram.v1.StorageService/ImportSpace": Action.IMPORT,
    "/engram.v1.StorageService/PurgeDocument": Action.PURGE,
    "/engram.v1.StorageService/DeleteSpace": Action.DELETE_SPACE,
    "/engram.v1.StorageService/ListSpaces": Action.LIST_SPACES,
    "/engram.v1.StorageService/WatchSpace": Action.READ,
    "/engram.v1.StorageService/ListAllDocuments": Action.LIST_ALL_DOCUMENTS,
    "/engram.v1.StorageService/GetStoredUsage": Action.STORED_USAGE,
    "/engram.v1.StorageService/SumStoredUsage": Action.STORED_USAGE,
    "/engram.v1.StorageService/PruneVersions": Action.PRUNE_VERSIONS,
    "/engram.v1.StorageService/ListAllSpaces": Action.LIST_ALL_SPACES,
    "/engram.v1.StorageService/ScanDocuments": Action.SCAN_DOCUMENTS,
    "/engram.v1.MaintenanceService/ListJobRuns": Action.LIST_JOB_RUNS,
    "/engram.v1.MaintenanceService/RunJob": Action.RUN_JOB,
    "/engram.v1.MaintenanceService/GetSpaceMaintenance": Action.GET_SPACE_MAINTENANCE,
    "/engram.v1.MaintenanceService/SetSpaceMaintenance": Action.SET_SPACE_MAINTENANCE,
    "/engram.v1.SearchService/Search": Action.SEARCH,
    "/engram.v1.WorkspaceService/MemoryRead": Action.READ,
    "/engram.v1.WorkspaceService/MemoryTree": Action.LIST,
    "/engram.v1.WorkspaceService/MemorySearch": Action.SEARCH,
    # Assembling records the agent's SOUL.md baseline, not a document: a read.
    "/engram.v1.WorkspaceService/GetSystemPrompt": Action.READ,
    "/engram.v1.WorkspaceService/MemoryWrite": Action.WRITE,
    "/engram.v1.WorkspaceService/AppendDailyLog": Action.WRITE,
    "/engram.v1.WorkspaceService/SeedWorkspace": Action.WRITE,
    "/engram.v1.WorkspaceService/CompleteBootstrap": Action.WRITE,
    "/engram.v1.IndexerService/Reindex": Action.REINDEX,
    "/engram.v1.IndexerService/GetIndexStatus": Action.INDEX_STATUS,
    "/engram.v1.IndexerService/GetIndexProgress": Action.INDEX_PROGRESS,
    "/engram.v1.QuotaService/Charge": Action.CHARGE,
    "/engram.v1.QuotaService/GetUsage": Action.TENANT_USAGE,
    "/engram.v1.QuotaService/SetTenantQuota": Action.SET_TENANT_QUOTA,
    "/engram.v1.QuotaService/Reconcile": Action.RECONCILE,
    "/engram.v1.QuotaService/SetOrgQuota": Action.SET_ORG_QUOTA,
    "/engram.v1.QuotaService/SetTenantOrg": Action.SET_TENANT_ORG,
    "/engram.v1.AuthzService/Authenticate": Action.AUTHENTICATE,
    "/engram.v1.AuthzService/Authorize": Action.AUTHORIZE,
    "/engram.v1.AuthzService/CreateToken": Action.CREATE_TOKEN,
    "/engram.v1.AuthzService/RevokeToken": Action.REVOKE_TOKEN,
    "/engram.v1.AuthzService/ListTokens": Action.LIST_TOKENS,
    "/engram.v1.AuthzService/ListAuditEvents": Action.LIST_AUDIT_EVENTS,
    "/engram.v1.AuthzService/RecordAuditEvent": Action.RECORD_AUDIT_EVENT,
}

# Each served RPC's row: its action's.
RPC_POLICY: dict[str, dict[Target, Who]] = {
    rpc: ACTION_POLICY[action] for rpc, action in RPC_ACTIONS.items()
}


def unlisted_methods(methods: Iterable[str]) -> list[str]:
    """The served methods (`/package.Service/Method`) with no row in RPC_POLICY."""
    return [method for method in methods if method not in RPC_POLICY]


def space_target(principal: Principal, requested: SpaceRef) -> Target:
    """Which column of a row applies to a request naming `requested`."""
    if requested.visibility is Visibility.GLOBAL:
        return Target.GLOBAL
    if requested.tenant and requested.tenant != principal.tenant:
        return Target.OTHER
    return Target.OWN


def permits(principal: Principal, action: Action, target: Target) -> bool:
    """Whether `principal` may take `action` on a target that is no space (a tenant, the
    instance): the action's row, a missing column refusing everyone."""
    return admits(ACTION_POLICY[action].get(target, Who.NOBODY), principal, target)


def _decide_erasure(principal: Principal, action: Action, requested: SpaceRef) -> Decision:
    """The erasure row first (a tenant admin of the space's tenant, a platform admin
    anywhere, never a service), then the mutation rules: stamping and the tenant check. A
    platform admin naming another tenant's space gets it as named (stamping would refuse
    another tenant)."""
    target = space_target(principal, requested)
    if not permits(principal, action, target):
        return _deny(
            ADMIN_ROLE_REQUIRED,
            "erasing for good needs an admin of the space's tenant (a service may not)",
        )
    if target is Target.OTHER:
        named = requested.with_identity(tenant=requested.tenant, user=requested.user)
        return Decision(allowed=True, rule="", message="", space=named, as_named=True)
    return _decide_by_space_rules(principal, Action.DELETE, requested)


def _decide_by_row(principal: Principal, action: Action, requested: SpaceRef) -> Decision:
    """A space-targeted action whose rules are not the read/mutate split (tenant admins, or
    platform admins and services naming another tenant's space), by its row."""
    target = space_target(principal, requested)
    who = ACTION_POLICY[action].get(target, Who.NOBODY)
    if target is Target.OTHER and not principal.service:
        if not admits(who, principal, target):
            return _deny(
                TENANT_MISMATCH,
                "the space names another tenant; leave space.tenant empty to use your own",
            )
        # A platform admin acting on another tenant's space: the ref is taken as named.
        validate_space_ref(requested)
        return Decision(allowed=True, rule="", message="", space=requested, as_named=True)
    stamped = stamp(principal, requested)
    if isinstance(stamped, Decision):
        return stamped
    if not admits(who, principal, target):
        rule = PLATFORM_ADMIN_REQUIRED if target is Target.GLOBAL else ADMIN_ROLE_REQUIRED
        if who is Who.SERVICE:
            rule = SERVICE_PRINCIPAL_REQUIRED
        return _deny(rule, f"{_ACTION_TEXT.get(action, action.value)} needs {_who_text(who)}")
    validate_space_ref(stamped)
    return Decision(allowed=True, rule="", message="", space=stamped)


def _who_text(who: Who) -> str:
    return _WHO_TEXT.get(who, who.value)


_ACTION_TEXT = {
    Action.LIST_JOB_RUNS: "listing a space's job runs",
    Action.RUN_JOB: "running a job",
    Action.GET_SPACE_MAINTENANCE: "reading a space's maintenance settings",
    Action.SET_SPACE_MAINTENANCE: "changing a space's maintenance settings",
}

_WHO_TEXT = {
    Who.TENANT_MEMBER: "membership of the space's tenant",
    Who.TENANT_ADMIN: "role admin in the space's tenant (or a platform admin)",
    Who.TENANT_ADMIN_OR_SERVICE: "role admin in the space's tenant, a platform admin or a service",
    Who.PLATFORM_ADMIN: "a platform admin",
    Who.PLATFORM_ADMIN_OR_SERVICE: "a platform admin or a service",
    Who.SERVICE: "a service principal",
}
