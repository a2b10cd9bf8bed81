"""The outbox and publisher ports the relay connects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engram.domain.outbox import OutboxMessage

__all__ = ["EventPublisher", "Outbox", "OutboxMessage"]


class Outbox(Protocol):
    async def pending(self, limit: int) -> list[OutboxMessage]:
        """The oldest unpublished events."""
        ...

    async def clear(self, messages: Sequence[OutboxMessage]) -> None:
        """Marks events published (idempotent)."""
        ...

    async def backlog(self) -> int: ...


class EventPublisher(Protocol):
    async def publish(self, messages: Sequence[OutboxMessage]) -> None:
        """Publishes every message or raises (Unavailable); a partial publish is retried whole,
        so consumers must tolerate duplicates (JetStream dedupes by event id)."""
        ...
