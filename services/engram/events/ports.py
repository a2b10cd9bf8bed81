"""The outbox and publisher ports the relay connects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A recorded, not yet published event. `key` identifies it to `Outbox.clear`."""

    key: str
    event_id: str
    subject: str
    payload: bytes
    # The W3C trace context of the write (sent as message headers); () when untraced.
    trace_context: tuple[tuple[str, str], ...] = ()


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
