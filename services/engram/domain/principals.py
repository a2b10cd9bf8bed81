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
    READ = "read"
    LIST = "list"
    USAGE = "usage"
    EXPORT = "export"
    SEARCH = "search"
    WRITE = "write"
    DELETE = "delete"
    IMPORT = "import"

    @property
    def mutates(self) -> bool:
        return self in (Action.WRITE, Action.DELETE, Action.IMPORT)


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
