"""The change feed room: a space's changes after a cursor, then live ones."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from engram.domain.changes import FeedItem, FeedStart, WatcherSlots, feed_start
from engram.domain.errors import Unavailable
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.storage.ports import ChangeFeed
from engram.storage.rooms.core import StorageCore

DEFAULT_MAX_WATCHERS = 256


class SpaceWatches:
    def __init__(
        self, core: StorageCore, feed: ChangeFeed | None, max_watchers: int = DEFAULT_MAX_WATCHERS
    ) -> None:
        self._core = core
        self._feed = feed
        self.watchers = WatcherSlots(max_watchers)

    async def watch(
        self, principal: Principal, space: SpaceRef, *, cursor: str, from_start: bool
    ) -> AsyncGenerator[FeedItem, None]:
        """The space's changes after `cursor` (authorized and validated up front), then live
        ones until the caller stops iterating; at most `max_watchers` at once per process."""
        granted = await self._core.authorize(principal, Action.READ, space)
        start = feed_start(cursor, from_start)
        if self._feed is None:
            raise Unavailable(
                "this server has no change feed (engram serve storage needs ENGRAM_NATS_URL "
                "for WatchSpace); retry against a server that publishes events"
            )
        return self._watch(self._feed, granted.space.id, start)

    async def _watch(
        self, feed: ChangeFeed, space_id: str, start: FeedStart
    ) -> AsyncGenerator[FeedItem, None]:
        # Taken when the stream starts, so a stream that never starts holds no slot.
        self.watchers.take()
        try:
            async with contextlib.aclosing(feed.changes(space_id, start)) as changes:
                async for item in changes:
                    yield item
        finally:
            self.watchers.give_back()
