"""AuthzService's results: principals, authorizations, tokens, audit events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engram.client.mapping import optional_time, space_from_proto
from engram.client.models import Space
from engram.v1 import authz_pb2

ROLES = {
    "viewer": authz_pb2.ROLE_VIEWER,
    "config_editor": authz_pb2.ROLE_CONFIG_EDITOR,
    "member": authz_pb2.ROLE_MEMBER,
    "admin": authz_pb2.ROLE_ADMIN,
    "org_admin": authz_pb2.ROLE_ORG_ADMIN,
}
ROLE_NAMES = {number: name for name, number in ROLES.items()}


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    tenant: str
    # viewer, config_editor, member or admin ("" for none).
    role: str
    platform_admin: bool
    service: bool
    token_id: str = ""


@dataclass(frozen=True, slots=True)
class Authorization:
    allowed: bool
    # Why not (member_role_required ...), when refused.
    reason: str
    # The space with tenant and user stamped from the caller's identity, and its id.
    space: Space
    space_id: str


@dataclass(frozen=True, slots=True)
class CreatedToken:
    # The secret (egm_...): shown once, stored only as a hash.
    token: str
    token_id: str
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    tenant: str
    user: str
    role: str
    description: str
    created_at: datetime | None
    expires_at: datetime | None
    created_by: str
    revoked: bool
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class AuditEvent:
    event_id: str
    # memory.global_write, memory.global_delete, memory.global_import ...
    action: str
    subject: str
    tenant: str
    space_id: str
    path: str
    bytes_delta: int
    at: datetime | None


def principal(message: authz_pb2.Principal) -> Principal:
    return Principal(
        subject=message.subject,
        tenant=message.tenant,
        role=ROLE_NAMES.get(message.role, ""),
        platform_admin=message.platform_admin,
        service=message.service,
        token_id=message.token_id,
    )


def authorization(message: authz_pb2.AuthorizeResponse) -> Authorization:
    return Authorization(
        allowed=message.allowed,
        reason=message.reason,
        space=space_from_proto(message.space),
        space_id=message.space_id,
    )


def created_token(message: authz_pb2.CreateTokenResponse) -> CreatedToken:
    return CreatedToken(
        token=message.token,
        token_id=message.token_id,
        expires_at=optional_time(message, "expires_at"),
    )


def token_info(message: authz_pb2.TokenInfo) -> TokenInfo:
    return TokenInfo(
        token_id=message.token_id,
        tenant=message.tenant,
        user=message.user,
        role=ROLE_NAMES.get(message.role, ""),
        description=message.description,
        created_at=optional_time(message, "created_at"),
        expires_at=optional_time(message, "expires_at"),
        created_by=message.created_by,
        revoked=message.revoked,
        revoked_at=optional_time(message, "revoked_at"),
    )


def audit_event(message: authz_pb2.AuditEvent) -> AuditEvent:
    return AuditEvent(
        event_id=message.event_id,
        action=message.action,
        subject=message.subject,
        tenant=message.tenant,
        space_id=message.space_id,
        path=message.path,
        bytes_delta=message.bytes_delta,
        at=optional_time(message, "at"),
    )
