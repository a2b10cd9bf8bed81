"""AuthzService calls: who a token is, what it may do, personal access tokens, the audit log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import grpc

from engram.client import mapping
from engram.client.base import AnySpace, ClientBase, Page, pages
from engram.client.mapping import timestamp
from engram.client.models import Space
from engram.domain.errors import InvalidArgument
from engram.v1 import authz_pb2, authz_pb2_grpc

ROLES = {
    "viewer": authz_pb2.ROLE_VIEWER,
    "config_editor": authz_pb2.ROLE_CONFIG_EDITOR,
    "member": authz_pb2.ROLE_MEMBER,
    "admin": authz_pb2.ROLE_ADMIN,
}
ROLE_NAMES = {number: name for name, number in ROLES.items()}
ACTIONS = {
    name.removeprefix("ACTION_").lower(): number
    for name, number in authz_pb2.Action.items()
    if number != authz_pb2.ACTION_UNSPECIFIED
}


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


def _authz(channel: grpc.aio.Channel) -> authz_pb2_grpc.AuthzServiceAsyncStub:
    return authz_pb2_grpc.AuthzServiceStub(channel)


def _named(table: dict[str, int], name: str, field: str) -> int:
    number = table.get(name)
    if number is None:
        raise InvalidArgument(f"{field} {name!r} is not one of {', '.join(table)}", field=field)
    return number


class AuthzCalls(ClientBase):
    """AuthzService."""

    async def authenticate(self, token: str) -> Principal:
        """The principal `token` (a JWT or egm_...) stands for; Unauthenticated if none."""
        request = authz_pb2.AuthenticateRequest(token=token)
        response = await self._call(
            "AuthzService.Authenticate", self._stub(_authz).Authenticate, request, idempotent=True
        )
        return principal(response.principal)

    async def authorize(self, action: str, *, space: AnySpace | None = None) -> Authorization:
        """Whether this client's token may do `action` (read, list, usage, export, search,
        write, delete, import) to the space; a refusal is an answer, not an error."""
        request = authz_pb2.AuthorizeRequest(
            action=_named(ACTIONS, action, "action"),  # type: ignore[arg-type]
            space=self._space(space),
        )
        response = await self._call(
            "AuthzService.Authorize", self._stub(_authz).Authorize, request, idempotent=True
        )
        return Authorization(
            allowed=response.allowed,
            reason=response.reason,
            space=mapping.space_from_proto(response.space),
            space_id=response.space_id,
        )

    async def create_token(
        self,
        *,
        user: str = "",
        role: str = "member",
        ttl_seconds: int = 0,
        description: str = "",
        tenant: str = "",
    ) -> CreatedToken:
        """Issues a personal access token (tenant admin); never retried (a repeat would
        issue a second one)."""
        request = authz_pb2.CreateTokenRequest(
            user=user,
            role=_named(ROLES, role, "role"),  # type: ignore[arg-type]
            ttl_seconds=ttl_seconds,
            description=description,
            tenant=tenant,
        )
        response = await self._call(
            "AuthzService.CreateToken", self._stub(_authz).CreateToken, request, idempotent=False
        )
        return CreatedToken(
            token=response.token,
            token_id=response.token_id,
            expires_at=mapping.optional_time(response, "expires_at"),
        )

    async def revoke_token(self, token_id: str) -> bool:
        """Revokes a token; False when it was revoked already. Retried on UNAVAILABLE."""
        request = authz_pb2.RevokeTokenRequest(token_id=token_id)
        response = await self._call(
            "AuthzService.RevokeToken", self._stub(_authz).RevokeToken, request, idempotent=True
        )
        return response.revoked

    async def list_tokens(
        self, *, tenant: str = "", user: str = "", page_size: int = 0, page_token: str = ""
    ) -> Page[TokenInfo]:
        """One page of a tenant's tokens (never their secrets), by token id."""
        request = authz_pb2.ListTokensRequest(
            tenant=tenant, user=user, page_size=page_size, page_token=page_token
        )
        response = await self._call(
            "AuthzService.ListTokens", self._stub(_authz).ListTokens, request, idempotent=True
        )
        return Page(tuple(token_info(t) for t in response.tokens), response.next_page_token)

    async def iter_tokens(
        self, *, tenant: str = "", user: str = "", page_size: int = 0
    ) -> AsyncIterator[TokenInfo]:
        """Every token of list_tokens, page after page."""

        async def page(token: str) -> Page[TokenInfo]:
            return await self.list_tokens(
                tenant=tenant, user=user, page_size=page_size, page_token=token
            )

        async for info in pages(page):
            yield info

    async def list_audit_events(
        self, *, since: datetime | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[AuditEvent]:
        """One page of audit events at or after `since`, oldest first (platform admin)."""
        request = authz_pb2.ListAuditEventsRequest(page_size=page_size, page_token=page_token)
        if since is not None:
            request.since.CopyFrom(timestamp(since))
        response = await self._call(
            "AuthzService.ListAuditEvents",
            self._stub(_authz).ListAuditEvents,
            request,
            idempotent=True,
        )
        return Page(tuple(audit_event(e) for e in response.events), response.next_page_token)

    async def iter_audit_events(
        self, *, since: datetime | None = None, page_size: int = 0
    ) -> AsyncIterator[AuditEvent]:
        """Every audit event of list_audit_events, page after page."""

        async def page(token: str) -> Page[AuditEvent]:
            return await self.list_audit_events(since=since, page_size=page_size, page_token=token)

        async for event in pages(page):
            yield event

    async def record_audit_event(
        self,
        action: str,
        *,
        subject: str = "",
        tenant: str = "",
        space_id: str = "",
        path: str = "",
        bytes_delta: int = 0,
        at: datetime | None = None,
    ) -> str:
        """Records an audit event (service principals only); returns its id. Never retried."""
        event = authz_pb2.AuditEvent(
            action=action,
            subject=subject,
            tenant=tenant,
            space_id=space_id,
            path=path,
            bytes_delta=bytes_delta,
        )
        if at is not None:
            event.at.CopyFrom(timestamp(at))
        response = await self._call(
            "AuthzService.RecordAuditEvent",
            self._stub(_authz).RecordAuditEvent,
            authz_pb2.RecordAuditEventRequest(event=event),
            idempotent=False,
        )
        return response.event_id


def principal(message: authz_pb2.Principal) -> Principal:
    return Principal(
        subject=message.subject,
        tenant=message.tenant,
        role=ROLE_NAMES.get(message.role, ""),
        platform_admin=message.platform_admin,
        service=message.service,
        token_id=message.token_id,
    )


def token_info(message: authz_pb2.TokenInfo) -> TokenInfo:
    return TokenInfo(
        token_id=message.token_id,
        tenant=message.tenant,
        user=message.user,
        role=ROLE_NAMES.get(message.role, ""),
        description=message.description,
        created_at=mapping.optional_time(message, "created_at"),
        expires_at=mapping.optional_time(message, "expires_at"),
        created_by=message.created_by,
        revoked=message.revoked,
        revoked_at=mapping.optional_time(message, "revoked_at"),
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
        at=mapping.optional_time(message, "at"),
    )
