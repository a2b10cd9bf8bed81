"""JetStreamPublisher: publishes outbox events to the ENGRAM_DOCS stream.

Every message carries `Nats-Msg-Id = event_id`, so a publish retried after a crash or an
outage is deduplicated by JetStream within the stream's duplicate window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import nats
from nats.aio.client import Client
from nats.errors import ConnectionClosedError, NoServersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError

from engram.domain.errors import Unavailable
from engram.events.ports import OutboxMessage

log = logging.getLogger(__name__)

STREAM = "ENGRAM_DOCS"
SUBJECTS = ["engram.docs.>"]
# Longer than any realistic gap between a publish and its outbox clear (relay restarts).
DUPLICATE_WINDOW_SECONDS = 600.0

_NATS_ERRORS = (
    ConnectionClosedError,
    NoServersError,
    NatsTimeoutError,
    NoStreamResponseError,
    APIError,
    OSError,
    asyncio.TimeoutError,
)


async def connect_nats(url: str, *, name: str) -> Client:
    """Connects with endless reconnects: an outage must not kill the process."""
    try:
        return await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=5,
            allow_reconnect=True,
        )
    except _NATS_ERRORS as error:
        raise Unavailable(f"cannot reach NATS at {url}: {type(error).__name__}") from None


async def ensure_stream(client: Client) -> None:
    """Creates (or updates) ENGRAM_DOCS: file storage, subjects engram.docs.>."""
    config = StreamConfig(
        name=STREAM,
        subjects=SUBJECTS,
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
        max_age=7 * 24 * 3600.0,
    )
    js = client.jetstream()
    try:
        await js.add_stream(config)
    except APIError as error:
        if getattr(error, "err_code", None) != 10058:  # stream name in use with another config
            raise
        await js.update_stream(config)


class JetStreamPublisher:
    """Connects on first use, so storage starts (and keeps recording events in its outbox)
    while NATS is down; the relay retries until it is back."""

    def __init__(self, url: str, *, name: str, timeout: float = 5.0) -> None:
        self._url = url
        self._name = name
        self._timeout = timeout
        self._client: Client | None = None
        self._stream_ready = False

    async def jetstream(self) -> JetStreamContext:
        """The JetStream context of this publisher's connection (the stream made sure of)."""
        return await self._jetstream()

    async def _jetstream(self) -> JetStreamContext:
        if self._client is None:
            self._client = await connect_nats(self._url, name=self._name)
        if not self._stream_ready:
            await ensure_stream(self._client)
            self._stream_ready = True
        return self._client.jetstream(timeout=self._timeout)

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(*_NATS_ERRORS):
                await self._client.drain()
            self._client = None

    async def publish(self, messages: Sequence[OutboxMessage]) -> None:
        try:
            js = await self._jetstream()
            acks = await asyncio.gather(
                *(
                    js.publish(
                        message.subject,
                        message.payload,
                        stream=STREAM,
                        # The write's trace context as W3C headers: consumers continue its trace.
                        headers={"Nats-Msg-Id": message.event_id, **dict(message.trace_context)},
                    )
                    for message in messages
                )
            )
        except _NATS_ERRORS as error:
            self._stream_ready = False
            raise Unavailable(f"publishing to JetStream failed: {type(error).__name__}") from None
        duplicates = sum(1 for ack in acks if ack.duplicate)
        if duplicates:
            log.info("jetstream deduplicated re-published events", extra={"count": duplicates})
