"""OutboxRelay: publishes recorded events, then clears them; retries with backoff.

A crash or a broker outage between a write and its publish loses nothing: the event stays
in the outbox until a publish succeeds, and the relay drains the backlog when the broker
returns. Writers call `changed()` so events go out at once instead of at the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import Counter, Gauge
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from engram.domain.errors import EngramError
from engram.events.ports import EventPublisher, Outbox
from engram.runtime.retrying import log_before_retry

log = logging.getLogger(__name__)

PUBLISHED = Counter("engram_outbox_published_total", "Events published from the outbox.")
PUBLISH_FAILURES = Counter(
    "engram_outbox_publish_failures_total", "Failed attempts to publish outbox events."
)
BACKLOG = Gauge("engram_outbox_backlog", "Events recorded but not yet published.")


class OutboxRelay:
    def __init__(
        self,
        outbox: Outbox,
        publisher: EventPublisher,
        *,
        batch_size: int = 256,
        poll_seconds: float = 1.0,
        max_backoff_seconds: float = 5.0,
    ) -> None:
        self._outbox = outbox
        self._publisher = publisher
        self._batch_size = batch_size
        self._poll_seconds = poll_seconds
        self._max_backoff = max_backoff_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()

    def changed(self) -> None:
        """A change was committed: publish without waiting for the next poll."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self, *, drain_seconds: float = 5.0) -> None:
        """Publishes what is pending (bounded by `drain_seconds`), then stops. What could
        not be published stays in the outbox for the next start."""
        if self._task is not None and drain_seconds > 0:
            await self.drained(drain_seconds)
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            # Waits without absorbing a cancel aimed at the caller itself.
            await asyncio.wait({task})

    async def drained(self, within_seconds: float) -> bool:
        """Waits until the outbox is empty (tests and graceful shutdown)."""
        try:
            async with asyncio.timeout(within_seconds):
                while await self._outbox.backlog():
                    self._wake.set()
                    await asyncio.sleep(0.01)
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        # Never gives up: a failed batch is tried again 0.1 s, 0.2 s, ... later, at most
        # `max_backoff_seconds` apart, until the broker and the outbox answer again.
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((EngramError, OSError, ConnectionError, TimeoutError)),
            wait=wait_exponential(multiplier=0.1, max=self._max_backoff),
            before_sleep=_count_and_log_failure,
        )
        while True:
            self._wake.clear()
            async for attempt in retrying:
                with attempt:
                    published = await self._publish_batch()
            if published == self._batch_size:
                continue  # more are waiting
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel
            # that arrives as the wait ends, and `stop` would then wait on this loop forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_seconds):
                    await self._wake.wait()

    async def _publish_batch(self) -> int:
        messages = await self._outbox.pending(self._batch_size)
        BACKLOG.set(len(messages))
        if not messages:
            return 0
        await self._publisher.publish(messages)
        await self._outbox.clear(messages)
        PUBLISHED.inc(len(messages))
        return len(messages)


_log_failure = log_before_retry(log, "outbox publish failed; retrying")


def _count_and_log_failure(state: RetryCallState) -> None:
    PUBLISH_FAILURES.inc()
    _log_failure(state)
