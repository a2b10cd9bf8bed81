"""AuthzService servicer: protobuf in, domain call, protobuf out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from engram.authz.service import AuthzService
from engram.domain.errors import InvalidArgument
from engram.domain.ports import AuditRecord
from engram.domain.principals import Action
from engram.runtime.context import current_principal
from engram.v1 import authz_pb2, authz_pb2_grpc
from engram.wire import (
    ROLE_FROM_PROTO,
    ROLE_TO_PROTO,
    from_timestamp,
    principal_to_proto,
    requested_space,
    space_to_proto,
    timestamp,
)

Context = grpc.aio.ServicerContext[Any, Any]

ACTIONS = {
    authz_pb2.ACTION_READ: Action.READ,
    authz_pb2.ACTION_LIST: Action.LIST,
    authz_pb2.ACTION_USAGE: Action.USAGE,
    authz_pb2.ACTION_EXPORT: Action.EXPORT,
    authz_pb2.ACTION_SEARCH: Action.SEARCH,
    authz_pb2.ACTION_WRITE: Action.WRITE,
    authz_pb2.ACTION_DELETE: Action.DELETE,
    authz_pb2.ACTION_IMPORT: Action.IMPORT,
}


class AuthzServicer(authz_pb2_grpc.AuthzServiceServicer):
    def __init__(self, service: AuthzService) -> None:
        self._service = service

    async def Authenticate(
        self, request: authz_pb2.AuthenticateRequest, context: Context
    ) -> authz_pb2.AuthenticateResponse:
        principal = await self._service.authenticate(request.token)
        return authz_pb2.AuthenticateResponse(principal=principal_to_proto(principal))

    async def Authorize(
        self, request: authz_pb2.AuthorizeRequest, context: Context
    ) -> authz_pb2.AuthorizeResponse:
        action = ACTIONS.get(request.action)
        if action is None:
            raise InvalidArgument(
                "action is required (ACTION_READ, ACTION_WRITE, ...)", field="action"
            )
        decision = self._service.authorize(
            current_principal(), action, requested_space(request.space)
        )
        response = authz_pb2.AuthorizeResponse(allowed=decision.allowed, reason=decision.rule)
        if decision.space is not None:
            response.space.CopyFrom(space_to_proto(decision.space))
            response.space_id = decision.space.id
        return response

    async def CreateToken(
        self, request: authz_pb2.CreateTokenRequest, context: Context
    ) -> authz_pb2.CreateTokenResponse:
        created = await self._service.create_token(
            current_principal(),
            user=request.user,
            role=ROLE_FROM_PROTO.get(request.role),
            ttl_seconds=request.ttl_seconds,
            description=request.description,
            tenant=request.tenant,
        )
        return authz_pb2.CreateTokenResponse(
            token=created.token,
            token_id=created.token_id,
            expires_at=timestamp(created.expires_at),
        )

    async def RevokeToken(
        self, request: authz_pb2.RevokeTokenRequest, context: Context
    ) -> authz_pb2.RevokeTokenResponse:
        await self._service.revoke_token(current_principal(), request.token_id)
        return authz_pb2.RevokeTokenResponse(revoked=True)

    async def ListTokens(
        self, request: authz_pb2.ListTokensRequest, context: Context
    ) -> authz_pb2.ListTokensResponse:
        page = await self._service.list_tokens(
            current_principal(),
            tenant=request.tenant,
            user=request.user,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        infos = []
        for stored in page.tokens:
            info = authz_pb2.TokenInfo(
                token_id=stored.token_id,
                tenant=stored.tenant,
                user=stored.user,
                role=ROLE_TO_PROTO[stored.role],
                description=stored.description,
                created_at=timestamp(stored.created_at),
                expires_at=timestamp(stored.expires_at),
                created_by=stored.created_by,
                revoked=stored.revoked_at is not None,
            )
            if stored.revoked_at is not None:
                info.revoked_at.CopyFrom(timestamp(stored.revoked_at))
            infos.append(info)
        return authz_pb2.ListTokensResponse(tokens=infos, next_page_token=page.next_page_token)

    async def ListAuditEvents(
        self, request: authz_pb2.ListAuditEventsRequest, context: Context
    ) -> authz_pb2.ListAuditEventsResponse:
        page = await self._service.list_audit(
            current_principal(),
            _since(request),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return authz_pb2.ListAuditEventsResponse(
            events=[
                authz_pb2.AuditEvent(
                    event_id=entry.event_id,
                    action=entry.record.action,
                    subject=entry.record.subject,
                    tenant=entry.record.tenant,
                    space_id=entry.record.space_id,
                    path=entry.record.path,
                    bytes_delta=entry.record.bytes_delta,
                    at=timestamp(entry.at),
                )
                for entry in page.entries
            ],
            next_page_token=page.next_page_token,
        )

    async def RecordAuditEvent(
        self, request: authz_pb2.RecordAuditEventRequest, context: Context
    ) -> authz_pb2.RecordAuditEventResponse:
        event = request.event
        event_id = await self._service.record_audit(
            current_principal(),
            AuditRecord(
                action=event.action,
                subject=event.subject,
                tenant=event.tenant,
                space_id=event.space_id,
                path=event.path,
                bytes_delta=event.bytes_delta,
            ),
        )
        return authz_pb2.RecordAuditEventResponse(event_id=event_id)


def _since(request: authz_pb2.ListAuditEventsRequest) -> datetime:
    if not request.HasField("since"):
        return datetime.fromtimestamp(0, UTC)
    try:
        return from_timestamp(request.since)
    except ValueError:
        raise InvalidArgument(
            "since must lie in years 1 to 9999, with nanos in 0..999,999,999", field="since"
        ) from None
