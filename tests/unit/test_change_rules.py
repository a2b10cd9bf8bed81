"""Where a watch starts, and which cursors are refused (engram.domain.changes)."""

from __future__ import annotations

import pytest

from engram.domain.changes import (
    CursorAhead,
    CursorExpired,
    FeedStart,
    TooManyWatchers,
    WatcherSlots,
    feed_start,
)
from engram.domain.errors import InvalidArgument

pytestmark = pytest.mark.unit


def test_an_empty_cursor_starts_now_or_at_the_oldest_retained_change() -> None:
    assert feed_start("", False).resolve(first=11, last=40) == 40
    assert feed_start("", True).resolve(first=11, last=40) == 10
    # An empty log: from the start is from the first change ever.
    assert feed_start("", True).resolve(first=1, last=0) == 0


def test_a_cursor_resumes_after_itself_while_nothing_after_it_was_dropped() -> None:
    assert feed_start("10", False).resolve(first=11, last=40) == 10
    assert feed_start("40", False).resolve(first=11, last=40) == 40
    with pytest.raises(CursorExpired, match="--from-start"):
        feed_start("9", False).resolve(first=11, last=40)
    with pytest.raises(CursorAhead, match="--from-start"):
        feed_start("41", False).resolve(first=11, last=40)


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", " 1", "١٢", "1" * 20])
def test_malformed_cursors_are_refused(cursor: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        feed_start(cursor, False)
    assert refused.value.field == "cursor"


def test_cursor_and_from_start_together_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="not both"):
        feed_start("5", True)
    assert feed_start("5", False) == FeedStart(5)


def test_watcher_slots_bound_and_come_back() -> None:
    slots = WatcherSlots(2)
    slots.take()
    slots.take()
    with pytest.raises(TooManyWatchers) as refused:
        slots.take()
    assert refused.value.retry_after_seconds
    slots.give_back()
    slots.take()
    assert slots.taken == 2
