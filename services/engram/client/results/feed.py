"""A space's change feed: what watch_space yields."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engram.client.mapping import optional_time
from engram.v1 import storage_pb2

CHANGE_KINDS = {
    storage_pb2.CHANGE_KIND_WRITTEN: "written",
    storage_pb2.CHANGE_KIND_DELETED: "deleted",
    storage_pb2.CHANGE_KIND_PURGED: "purged",
    storage_pb2.CHANGE_KIND_SPACE_DELETED: "space_deleted",
}


@dataclass(frozen=True, slots=True)
class SpaceChange:
    """One change of the feed (never content: read the document for that)."""

    # Pass it back as watch_space(cursor=...) to resume after this change.
    cursor: str
    # written, deleted, purged or space_deleted.
    kind: str
    path: str
    version: int
    sha256: str
    size_bytes: int
    at: datetime | None
    document_id: str
    event_id: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """What watch_space yields: a change, or (once) word that the replay caught up."""

    change: SpaceChange | None = None
    caught_up: bool = False


def space_change(message: storage_pb2.SpaceChange) -> SpaceChange:
    return SpaceChange(
        cursor=message.cursor,
        kind=CHANGE_KINDS.get(message.kind, "unspecified"),
        path=message.path,
        version=message.version,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        at=optional_time(message, "at"),
        document_id=message.document_id,
        event_id=message.event_id,
    )


def watch_event(message: storage_pb2.WatchSpaceResponse) -> WatchEvent:
    if message.HasField("change"):
        return WatchEvent(change=space_change(message.change))
    return WatchEvent(caught_up=message.caught_up)
