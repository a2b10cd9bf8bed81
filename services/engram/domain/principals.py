"""Principals, roles and actions."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class Role(IntEnum):
    """A principal's role in its team, in increasing order of power."""

    VIEWER = 1
    CONFIG_EDITOR = 2
    MEMBER = 3
    ADMIN = 4
    # An admin of the team who also administers the org the team belongs to: sets the
    # org's quota ceiling (QuotaService.SetOrgQuota).
    ORG_ADMIN = 5


class Action(StrEnum):
    """What a principal asks to do; use cases ask the Authorizer about these, never about
    RPCs (engram.domain.policy says who may do each)."""

    # On a space, by the read/mutate rules (`decide`).
    READ = "read"
    LIST = "list"
    USAGE = "usage"
    EXPORT = "export"
    SEARCH = "search"
    WRITE = "write"
    DELETE = "delete"
    IMPORT = "import"
    # Erasing for good: a space's tenant admins, platform admins anywhere, never a service.
    PURGE = "purge"
    DELETE_SPACE = "delete_space"
    # On a space or a tenant, by their rows in the policy table.
    LIST_SPACES = "list_spaces"
    REINDEX = "reindex"
    INDEX_STATUS = "index_status"
    # What the indexes hold of named documents (search's read-your-writes waits).
    INDEX_PROGRESS = "index_progress"
    # Every document of every space (the indexer's backfills).
    LIST_ALL_DOCUMENTS = "list_all_documents"
    LIST_JOB_RUNS = "list_job_runs"
    RUN_JOB = "run_job"
    GET_SPACE_MAINTENANCE = "get_space_maintenance"
    SET_SPACE_MAINTENANCE = "set_space_maintenance"
    CHARGE = "charge"
    TENANT_USAGE = "tenant_usage"
    SET_TENANT_QUOTA = "set_tenant_quota"
    RECONCILE = "reconcile"
    SET_ORG_QUOTA = "set_org_quota"
    SET_TENANT_ORG = "set_tenant_org"
    AUTHENTICATE = "authenticate"
    AUTHORIZE = "authorize"
    CREATE_TOKEN = "create_token"
    REVOKE_TOKEN = "revoke_token"
    LIST_TOKENS = "list_tokens"
    LIST_AUDIT_EVENTS = "list_audit_events"
    RECORD_AUDIT_EVENT = "record_audit_event"
    # Storage's upkeep for other services (quota, maintenance): service principals only.
    STORED_USAGE = "stored_usage"
    PRUNE_VERSIONS = "prune_versions"
    LIST_ALL_SPACES = "list_all_spaces"
    SCAN_DOCUMENTS = "scan_documents"

    @property
    def mutates(self) -> bool:
        return self in (Action.WRITE, Action.DELETE, Action.IMPORT)

    @property
    def by_space_rules(self) -> bool:
        """Decided by the read/mutate rules of a space (not by a row of its own)."""
        return self in _SPACE_RULE_ACTIONS


_SPACE_RULE_ACTIONS = frozenset(
    (
        Action.READ,
        Action.LIST,
        Action.USAGE,
        Action.EXPORT,
        Action.SEARCH,
        Action.WRITE,
        Action.DELETE,
        Action.IMPORT,
    )
)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. Service principals act for any tenant."""

    subject: str
    tenant: str
    role: Role
    platform_admin: bool = False
    service: bool = False
    token_id: str = ""


LOCAL_TENANT = "local"

# `engram dev` without --auth: one implicit admin in tenant "local".
LOCAL_ADMIN = Principal(
    subject="local-admin", tenant=LOCAL_TENANT, role=Role.ADMIN, platform_admin=True
)

# The maintenance worker's identity (dreaming, hygiene): a service principal, so it acts
# for any tenant, and every write it makes is authorized, counted and audited like a
# caller's.
MAINTENANCE = Principal(subject="engram-maintenance", tenant="", role=Role.ADMIN, service=True)
