"""The outbox relay always stops when asked, whenever the request lands."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from engram.events.ports import OutboxMessage
from engram.events.relay import PUBLISH_FAILURES, OutboxRelay

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


class ListOutbox:
    def __init__(self, messages: list[OutboxMessage]) -> None:
        self.messages = messages

    async def pending(self, limit: int) -> list[OutboxMessage]:
        return self.messages[:limit]

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        cleared = {message.key for message in messages}
        self.messages = [m for m in self.messages if m.key not in cleared]

    async def backlog(self) -> int:
        return len(self.messages)


class FlakyPublisher:
    """Down for the first `outages` publishes (as a broker restarting), then up."""

    def __init__(self, outages: int) -> None:
        self.outages = outages
        self.published: list[str] = []

    async def publish(self, messages: Sequence[OutboxMessage]) -> None:
        if self.outages:
            self.outages -= 1
            raise ConnectionRefusedError("broker down")
        self.published.extend(message.key for message in messages)


async def test_a_failed_publish_is_retried_until_the_broker_answers() -> None:
    messages = [OutboxMessage(f"k{i}", f"e{i}", "engram.docs.x", b"{}") for i in range(3)]
    outbox, publisher = ListOutbox(messages), FlakyPublisher(outages=3)
    failures_before = PUBLISH_FAILURES._value.get()
    relay = OutboxRelay(outbox, publisher, poll_seconds=5.0, max_backoff_seconds=0.2)
    relay.start()
    try:
        # 0.1 + 0.2 + 0.2 s of backoff, far below the 5 s poll: the retries publish, not a poll.
        assert await relay.drained(3.0), "the backlog was not published after the outage"
    finally:
        await relay.stop(drain_seconds=0)
    assert publisher.published == ["k0", "k1", "k2"]
    assert PUBLISH_FAILURES._value.get() - failures_before == 3
