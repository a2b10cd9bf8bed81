"""What an outbox hands its relay: one recorded, not yet published event."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """A recorded, not yet published event. `key` identifies it to `Outbox.clear`."""

    key: str
    event_id: str
    subject: str
    payload: bytes
    # The W3C trace context of the write (sent as message headers); () when untraced.
    trace_context: tuple[tuple[str, str], ...] = ()
