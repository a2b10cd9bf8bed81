"""Protobuf <-> domain conversions shared by every service: spaces, principals, times, events."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from engram.domain.documents import DocumentEvent, EventOp
from engram.domain.errors import InvalidArgument, InvalidSpaceRef
from engram.domain.positions import IndexPosition
from engram.domain.principals import Principal, Role
from engram.domain.spaces import SpaceRef, Visibility, parse_space_id
from engram.v1 import authz_pb2, events_pb2, position_pb2, space_pb2

VISIBILITY_FROM_PROTO: dict[int, Visibility] = {
    space_pb2.VISIBILITY_PRIVATE: Visibility.PRIVATE,
    space_pb2.VISIBILITY_BOT: Visibility.BOT,
    space_pb2.VISIBILITY_PROJECT: Visibility.PROJECT,
    space_pb2.VISIBILITY_CROSS_PROJECT: Visibility.CROSS_PROJECT,
    space_pb2.VISIBILITY_USER: Visibility.USER,
    space_pb2.VISIBILITY_ORG: Visibility.ORG,
    space_pb2.VISIBILITY_GLOBAL: Visibility.GLOBAL,
}
VISIBILITY_TO_PROTO: dict[Visibility, space_pb2.Visibility.ValueType] = {
    v: space_pb2.Visibility.ValueType(k) for k, v in VISIBILITY_FROM_PROTO.items()
}
ROLE_FROM_PROTO: dict[int, Role] = {
    authz_pb2.ROLE_VIEWER: Role.VIEWER,
    authz_pb2.ROLE_CONFIG_EDITOR: Role.CONFIG_EDITOR,
    authz_pb2.ROLE_MEMBER: Role.MEMBER,
    authz_pb2.ROLE_ADMIN: Role.ADMIN,
    authz_pb2.ROLE_ORG_ADMIN: Role.ORG_ADMIN,
}
ROLE_TO_PROTO: dict[Role, authz_pb2.Role.ValueType] = {
    v: authz_pb2.Role.ValueType(k) for k, v in ROLE_FROM_PROTO.items()
}


def position_to_proto(position: IndexPosition) -> position_pb2.IndexPosition:
    return position_pb2.IndexPosition(
        space_id=position.space_id,
        path=position.path,
        document_id=position.document_id,
        version=position.version,
    )


def position_from_proto(position: position_pb2.IndexPosition) -> IndexPosition:
    return IndexPosition(
        space_id=position.space_id,
        path=position.path,
        document_id=position.document_id,
        version=position.version,
    )


def requested_space(message: space_pb2.SpaceRef, *, field: str = "space") -> SpaceRef:
    """The space as requested, not yet stamped or validated (authorization does both)."""
    visibility = VISIBILITY_FROM_PROTO.get(message.visibility)
    if visibility is None:
        raise InvalidSpaceRef(
            f"{field}.visibility is required: one of " + ", ".join(v.value for v in Visibility),
            field=f"{field}.visibility",
        )
    return SpaceRef(
        visibility=visibility,
        tenant=message.tenant,
        name=message.name,
        project=message.project,
        bot=message.bot,
        user=message.user,
    )


def space_to_proto(space: SpaceRef) -> space_pb2.SpaceRef:
    return space_pb2.SpaceRef(
        visibility=VISIBILITY_TO_PROTO[space.visibility],
        tenant=space.tenant,
        project=space.project,
        bot=space.bot,
        user=space.user,
        name=space.name,
    )


def timestamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at.astimezone(UTC))
    return stamp


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


def principal_to_proto(principal: Principal) -> authz_pb2.Principal:
    return authz_pb2.Principal(
        subject=principal.subject,
        tenant=principal.tenant,
        role=ROLE_TO_PROTO[principal.role],
        platform_admin=principal.platform_admin,
        service=principal.service,
        token_id=principal.token_id,
    )


def principal_from_proto(message: authz_pb2.Principal) -> Principal:
    role = ROLE_FROM_PROTO.get(message.role)
    if role is None:
        raise InvalidArgument("principal has no role", field="principal.role")
    return Principal(
        subject=message.subject,
        tenant=message.tenant,
        role=role,
        platform_admin=message.platform_admin,
        service=message.service,
        token_id=message.token_id,
    )


_OP_TO_PROTO = {
    EventOp.UPSERT: events_pb2.DOCUMENT_OP_UPSERT,
    EventOp.DELETE: events_pb2.DOCUMENT_OP_DELETE,
    EventOp.PURGE: events_pb2.DOCUMENT_OP_PURGE,
    EventOp.SPACE_DELETE: events_pb2.DOCUMENT_OP_SPACE_DELETE,
}
_OP_FROM_PROTO = {v: k for k, v in _OP_TO_PROTO.items()}


def encode_event(event: DocumentEvent) -> bytes:
    """The JetStream payload of a document event."""
    return events_pb2.DocumentEvent(
        event_id=event.event_id,
        space=space_to_proto(event.space),
        space_id=event.space_id,
        path=event.path,
        op=_OP_TO_PROTO[event.op],
        version=event.version,
        sha256=event.sha256,
        size_bytes=event.size_bytes,
        at=timestamp(event.at),
        document_id=event.document_id,
        trace_context=dict(event.trace_context),
    ).SerializeToString()


def decode_event(payload: bytes) -> DocumentEvent:
    message = events_pb2.DocumentEvent.FromString(payload)
    return DocumentEvent(
        event_id=message.event_id,
        space=parse_space_id(message.space_id),
        path=message.path,
        op=_OP_FROM_PROTO[message.op],
        version=message.version,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        at=from_timestamp(message.at),
        document_id=message.document_id,
        trace_context=tuple(sorted(message.trace_context.items())),
    )
