"""Ports several service packages share: authorization, audit records, usage reports.

Each is defined once here, so storage, quota, authz, search and the indexer depend on this
neutral module instead of on each other's `ports`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engram.domain.policy import Target
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef


@dataclass(frozen=True, slots=True)
class AuthorizedSpace:
    space: SpaceRef
    # Non-empty for changes that must leave an audit row (global mutations).
    audit_action: str = ""
    # For a change to a global space: the tenant whose principal makes it, whose usage
    # records the bytes as attribution only (the instance aggregate is what limits them).
    attributed_tenant: str = ""


class Authorizer(Protocol):
    """Decides and enforces who may do what (see engram.domain.policy), stamping tenant and
    user from the identity."""

    async def authorize(
        self, principal: Principal, action: Action, space: SpaceRef
    ) -> AuthorizedSpace: ...

    async def permits(self, principal: Principal, action: Action, target: Target) -> bool:
        """Whether `principal` may take `action` on a target that is no space: its own
        tenant, another tenant, the global spaces or the whole instance."""
        ...


@dataclass(frozen=True, slots=True)
class AuditRecord:
    action: str
    subject: str
    tenant: str
    space_id: str
    path: str
    bytes_delta: int


class AuditSink(Protocol):
    async def record(self, entry: AuditRecord) -> None: ...


@dataclass(frozen=True, slots=True)
class UsageReport:
    space_used_bytes: int
    space_quota_bytes: int
    aggregate_used_bytes: int
    aggregate_quota_bytes: int
