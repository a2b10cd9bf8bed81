"""Protobuf <-> the client's spaces, times and index positions, which every call uses; the
results' own conversions sit beside them in engram.client.results."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from engram.client.models import Space
from engram.domain.errors import InvalidSpaceRef
from engram.domain.positions import IndexPosition
from engram.v1 import position_pb2, space_pb2

if TYPE_CHECKING:
    from engram.domain.spaces import SpaceRef
    from engram.v1 import storage_pb2, workspace_pb2


# Visibility numbers and the client's names for them ("private", "cross_project" ...).
VISIBILITY_NAMES: dict[int, str] = {
    number: name.removeprefix("VISIBILITY_").lower()
    for name, number in space_pb2.Visibility.items()
    if number != space_pb2.VISIBILITY_UNSPECIFIED
}
VISIBILITY_NUMBERS = {
    name: space_pb2.Visibility.ValueType(number) for number, name in VISIBILITY_NAMES.items()
}


def space_to_proto(space: Space | SpaceRef) -> space_pb2.SpaceRef:
    """The wire's SpaceRef for the client's Space or the domain's SpaceRef (engram's own
    services hold those; its visibility is an enum whose value is the same name). Both are
    frozen, so the message is built once per space and shared: callers copy it into their
    requests (a message given to a constructor or CopyFrom is copied), never change it."""
    return _space_message(space)


@functools.lru_cache(maxsize=1024)
def _space_message(space: Space | SpaceRef) -> space_pb2.SpaceRef:
    visibility = space.visibility if isinstance(space, Space) else space.visibility.value
    number = VISIBILITY_NUMBERS.get(visibility)
    if number is None:
        raise InvalidSpaceRef(f"visibility {visibility!r} is unknown", field="space.visibility")
    return space_pb2.SpaceRef(
        visibility=number,
        name=space.name,
        project=space.project,
        bot=space.bot,
        user=space.user,
        tenant=space.tenant,
    )


def space_from_proto(message: space_pb2.SpaceRef) -> Space:
    return _space(
        message.visibility, message.name, message.project, message.bot, message.user,
        message.tenant,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _space(visibility: int, name: str, project: str, bot: str, user: str, tenant: str) -> Space:
    """Spaces come back on every answer, mostly the same few: each is made once."""
    return Space(
        visibility=VISIBILITY_NAMES.get(visibility, "private"),
        name=name,
        project=project,
        bot=bot,
        user=user,
        tenant=tenant,
    )


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


def timestamp(moment: datetime) -> Timestamp:
    """An aware datetime (a naive one is taken as UTC) as a protobuf Timestamp."""
    stamp = Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return stamp


def position_to_proto(position: IndexPosition) -> position_pb2.IndexPosition:
    return position_pb2.IndexPosition(
        space_id=position.space_id,
        path=position.path,
        document_id=position.document_id,
        version=position.version,
    )


def position_from_proto(message: position_pb2.IndexPosition) -> IndexPosition:
    return IndexPosition(
        space_id=message.space_id,
        path=message.path,
        document_id=message.document_id,
        version=message.version,
    )


def optional_time(message: Message, field: str) -> datetime | None:
    """The message's timestamp `field` as a datetime; None when unset."""
    return from_timestamp(getattr(message, field)) if message.HasField(field) else None


def optional_position(
    message: workspace_pb2.MemoryWriteResponse
    | workspace_pb2.AppendDailyLogResponse
    | storage_pb2.WriteDocumentResponse,
) -> IndexPosition | None:
    """A write's index position; None when the server does not say."""
    return position_from_proto(message.position) if message.HasField("position") else None
