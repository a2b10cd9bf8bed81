"""The change feed's records and rules: what a watcher sees of a document event, and where a
watch starts.

A cursor is the position of a change in the durable event log the feed reads (the outbox
sequence in `engram dev`, the JetStream stream sequence in production), written as a decimal
string. Positions grow with every change, so "everything after cursor C" is well defined and a
watcher that resumes from its last cursor misses nothing and sees nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from engram.domain.documents import DocumentEvent, EventOp
from engram.domain.errors import InvalidArgument, RateLimited

# Longest cursor accepted: 19 digits hold any int64 sequence.
MAX_CURSOR_CHARS = 19


class ChangeKind(StrEnum):
    WRITTEN = "written"
    DELETED = "deleted"
    PURGED = "purged"
    SPACE_DELETED = "space_deleted"


KIND_OF_OP: Final = {
    EventOp.UPSERT: ChangeKind.WRITTEN,
    EventOp.DELETE: ChangeKind.DELETED,
    EventOp.PURGE: ChangeKind.PURGED,
    EventOp.SPACE_DELETE: ChangeKind.SPACE_DELETED,
}


@dataclass(frozen=True, slots=True)
class SpaceChange:
    """One change to a space as a watcher sees it; never content."""

    position: int
    kind: ChangeKind
    path: str
    version: int
    sha256: str
    size_bytes: int
    at: datetime
    document_id: str
    event_id: str

    @property
    def cursor(self) -> str:
        return str(self.position)


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """Every change stored when the watch began has been sent; what follows is live."""


CAUGHT_UP: Final = CaughtUp()

FeedItem = SpaceChange | CaughtUp


def change_of(event: DocumentEvent, position: int) -> SpaceChange:
    return SpaceChange(
        position=position,
        kind=KIND_OF_OP[event.op],
        path=event.path,
        version=event.version,
        sha256=event.sha256,
        size_bytes=event.size_bytes,
        at=event.at,
        document_id=event.document_id,
        event_id=event.event_id,
    )


@dataclass(frozen=True, slots=True)
class FeedStart:
    """Where a watch begins: after position `after`, or (None) at the oldest retained change
    when `from_start`, else with the next change."""

    after: int | None
    from_start: bool = False

    def resolve(self, *, first: int, last: int) -> int:
        """The position the watch continues after, given the log's oldest retained position
        `first` (last + 1 when nothing is retained) and its newest `last` (0 when empty).
        Raises CursorExpired or CursorAhead for a cursor the log cannot continue."""
        if self.after is None:
            return first - 1 if self.from_start else last
        if self.after > last:
            raise CursorAhead(
                f"cursor {self.after} is ahead of this server's change feed (its newest change "
                f"is {last}); the data was reset: start again with --from-start",
                field="cursor",
            )
        if self.after + 1 < first:
            raise cursor_expired(self.after)
        return self.after


def feed_start(cursor: str, from_start: bool) -> FeedStart:
    """Validates a WatchSpace request's cursor and from_start."""
    if not cursor:
        return FeedStart(None, from_start)
    if from_start:
        raise InvalidArgument(
            "give either cursor (to resume) or from_start (to replay), not both", field="cursor"
        )
    if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii() or not cursor.isdigit():
        raise InvalidArgument(
            "cursor must be a cursor a previous change carried (digits); leave it empty to "
            "start with the next change",
            field="cursor",
        )
    return FeedStart(int(cursor))


class CursorExpired(InvalidArgument):
    """The changes after the cursor are no longer retained."""

    reason = "CURSOR_EXPIRED"


class CursorAhead(InvalidArgument):
    """The cursor names a change this feed never had (the data was reset)."""

    reason = "CURSOR_AHEAD"


def cursor_expired(after: int) -> CursorExpired:
    return CursorExpired(
        f"changes after cursor {after} are no longer retained (older than the feed's "
        "retention); start again with --from-start and re-read the space",
        field="cursor",
    )


class TooManyWatchers(RateLimited):
    reason = "TOO_MANY_WATCHERS"


class WatcherSlots:
    """Bounds the watches one process serves at once."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._taken = 0

    @property
    def taken(self) -> int:
        return self._taken

    def take(self) -> None:
        if self._taken >= self._limit:
            raise TooManyWatchers(
                f"this server already serves {self._limit} watches (ENGRAM_FEED_MAX_WATCHERS); "
                "retry later or close another watch",
                retry_after_seconds=5.0,
            )
        self._taken += 1

    def give_back(self) -> None:
        self._taken -= 1
