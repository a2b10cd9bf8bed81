"""The outbox relay always stops when asked, whenever the request lands."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from engram.events.ports import OutboxMessage
from engram.events.relay import OutboxRelay

pytestmark = pytest.mark.unit


class EmptyOutbox:
    async def pending(self, limit: int) -> list[OutboxMessage]:
        return []

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        return None

    async def backlog(self) -> int:
        return 0


class NoPublisher:
    async def publish(self, messages: Sequence[OutboxMessage]) -> None:
        return None


@pytest.mark.parametrize("poll_seconds", [0.0002, 1.0])
async def test_stop_right_after_a_change_always_ends(poll_seconds: float) -> None:
    # A write's wake-up (or the drain's) landing just before the stop's cancel is the moment
    # Python 3.11's wait_for swallows the cancel, which left `stop` waiting forever.
    rng = random.Random(7)
    for _ in range(300):
        relay = OutboxRelay(EmptyOutbox(), NoPublisher(), poll_seconds=poll_seconds)
        relay.start()
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        relay.changed()
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        stopping = asyncio.ensure_future(relay.stop(drain_seconds=0))
        done, _ = await asyncio.wait({stopping}, timeout=5)
        assert done, "stop() did not return: the relay loop outlived its cancel"
