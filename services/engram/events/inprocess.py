"""InProcessPublisher: `engram dev`'s event bus; hands events to local consumers.

The relay clears an event only after every consumer handled it, so the outbox itself is the
durable queue: a crash re-delivers what was not handled (consumers are idempotent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from engram.events.ports import OutboxMessage

EventHandler = Callable[[Sequence[OutboxMessage]], Awaitable[None]]


class InProcessPublisher:
    def __init__(self) -> None:
        self._handlers: list[EventHandler] = []

    def subscribe(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    async def publish(self, messages: Sequence[OutboxMessage]) -> None:
        for handler in self._handlers:
            await handler(messages)
