"""AuthzService calls: who a token is, what it may do, personal access tokens, the audit log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING

import grpc

from engram.client.base import AnySpace, ClientBase, pages
from engram.client.mapping import timestamp
from engram.domain.errors import InvalidArgument
from engram.v1 import authz_pb2, authz_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.authz import (
        AuditEvent,
        Authorization,
        CreatedToken,
        Principal,
        TokenInfo,
    )
    from engram.client.results.page import Page

ACTIONS = {
    name.removeprefix("ACTION_").lower(): number
    for name, number in authz_pb2.Action.items()
    if number != authz_pb2.ACTION_UNSPECIFIED
}


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
        from engram.client.results.authz import principal

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
        from engram.client.results.authz import authorization

        return authorization(response)

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
        from engram.client.results.authz import ROLES, created_token

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
        return created_token(response)

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
        from engram.client.results.authz import token_info
        from engram.client.results.page import Page

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
        from engram.client.results.authz import audit_event
        from engram.client.results.page import Page

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
