"""JetStreamIndexConsumer: the production indexer loop on the durable pull consumer `indexer`.

Every replica binds the same durable consumer on ENGRAM_DOCS (`engram.docs.>`, explicit
ack), so events are spread over replicas and survive restarts. Per process:

* Events are grouped by document. A document gets one indexing run at a time; events for it
  that arrive during a run wait for the next run (that run may have read storage before
  their change) and are then answered together.
* An event is acked only after a run that started after it arrived returned, i.e. after
  both indexes hold the document's state at or after the event's change.
* A run that fails because a backend is unavailable (an index, storage: `Unavailable`) is
  not the event's fault: it is retried in place (0.5 s, 1 s, ... at most 5 s apart) while its
  events are kept alive, for up to `outage_wait_seconds`, so an outage does not use up the
  events' delivery budget and nothing is dead-lettered because OpenSearch restarted. The
  slots such runs hold stop the pull loop, so the backlog waits in the stream meanwhile.
* A failed run naks its events with exponential backoff; an event whose attempt
  `indexer_max_deliver` failed (or that arrives past that many deliveries, after crashes)
  is published to `engram.deadletter.docs` (stream ENGRAM_DEADLETTER, outside
  `engram.docs.>`), counted in `engram_indexer_dead_letters_total`, and terminated.
* While a document is being indexed its events are kept alive (`in_progress`) every third of
  the ack wait, so a large document is not redelivered to another replica meanwhile; a
  crashed replica's events come back after the ack wait.
* Reindex requests are events on `engram.docs.reindex`, so they travel the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError
from prometheus_client import Counter
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from engram.domain.documents import DocumentEvent
from engram.domain.errors import Unavailable
from engram.domain.spaces import SpaceRef
from engram.events.jetstream import STREAM, SUBJECTS, JetStreamPublisher, ensure_stream
from engram.events.ports import OutboxMessage
from engram.indexer.service import reindex_events
from engram.indexer.worker import (
    DEAD_LETTERS,
    DocumentKey,
    IndexWorker,
    UndecodableEvent,
    event_documents,
    observe_lag,
    read_event,
)
from engram.runtime.retrying import log_before_retry
from engram.wire import encode_event

log = logging.getLogger(__name__)

REINDEX_SUBJECT = "engram.docs.reindex"
DEAD_LETTER_STREAM = "ENGRAM_DEADLETTER"
DEAD_LETTER_SUBJECT = "engram.deadletter.docs"
# How long one fetch waits for an event before the loop looks around again.
FETCH_WAIT_SECONDS = 1.0
OUTAGE_RETRIES = Counter(
    "engram_indexer_outage_retries_total",
    "Indexing runs retried in place because a backend (an index, storage) was unavailable.",
)
# The server's own redelivery cap sits a little above ours: a delivery past our limit is
# dead-lettered on arrival, and a failed dead-letter publish gets a few more chances.
SERVER_DELIVERY_SLACK = 3

_NATS_ERRORS = (nats.errors.Error, OSError)
# Messages past the ack floor looked at to find the oldest one still in the stream.
_PENDING_PROBES = 16


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    durable: str = "indexer"
    ack_wait_seconds: float = 30.0
    max_deliver: int = 8
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    fetch_batch: int = 64
    concurrency: int = 8
    drain_seconds: float = 10.0
    outage_wait_seconds: float = 900.0
    outage_retry_max_seconds: float = 5.0


def retry_delay(attempt: int, *, base: float, cap: float) -> float:
    """Delay before attempt `attempt + 1`: base * 2^(attempt-1), capped, jittered into its
    upper half so replicas that failed together do not retry together."""
    ceiling = min(cap, base * 2 ** max(0, attempt - 1))
    return random.uniform(ceiling / 2, ceiling)


async def ensure_streams(client: Client) -> None:
    """ENGRAM_DOCS (as storage creates it) and the dead-letter stream."""
    await ensure_stream(client)
    config = StreamConfig(
        name=DEAD_LETTER_STREAM,
        subjects=["engram.deadletter.>"],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        duplicate_window=600.0,
        max_age=30 * 24 * 3600.0,
    )
    js = client.jetstream()
    try:
        await js.add_stream(config)
    except APIError as error:
        if getattr(error, "err_code", None) != 10058:  # exists with another config
            raise
        await js.update_stream(config)


def consumer_config(options: ConsumerOptions) -> ConsumerConfig:
    return ConsumerConfig(
        name=options.durable,
        durable_name=options.durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=options.ack_wait_seconds,
        max_deliver=options.max_deliver + SERVER_DELIVERY_SLACK,
        filter_subject=SUBJECTS[0],
        max_ack_pending=max(1000, 4 * options.fetch_batch),
    )


@dataclass(eq=False, slots=True)
class _Held:
    """A delivered, unsettled message and the event it carries."""

    msg: Msg
    # None for a payload that is not a DocumentEvent (dead-lettered on arrival).
    event: DocumentEvent | None


class JetStreamIndexConsumer:
    """Pulls document events and runs the worker on them (see the module docstring)."""

    def __init__(self, client: Client, worker: IndexWorker, options: ConsumerOptions) -> None:
        self._client = client
        self._worker = worker
        self._options = options
        self._js: JetStreamContext = client.jetstream()
        self._subscription: JetStreamContext.PullSubscription | None = None
        self._running: dict[DocumentKey, asyncio.Task[None]] = {}
        self._followers: dict[DocumentKey, list[_Held]] = {}
        self._holding: set[_Held] = set()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Creates the streams and the durable consumer (or updates its settings), binds it
        and starts pulling. After `stop`, starts again (events waited in the stream)."""
        self._stopping.clear()
        try:
            await ensure_streams(self._client)
            await self._ensure_consumer()
            self._subscription = await self._js.pull_subscribe_bind(
                durable=self._options.durable, stream=STREAM
            )
        except _NATS_ERRORS as error:
            raise Unavailable(
                f"cannot set up the JetStream consumer: {type(error).__name__}: {error}"
            ) from None
        self._loop_task = asyncio.create_task(self._pull(), name="indexer-pull")
        self._keepalive_task = asyncio.create_task(self._keep_alive(), name="indexer-keepalive")

    async def _ensure_consumer(self) -> None:
        """Creates the durable consumer, or updates the settings a consumer may change; one
        that exists with settings it may not change (say, a deliver policy an operator
        chose) is used as it is."""
        config = consumer_config(self._options)
        try:
            await self._js.add_consumer(STREAM, config=config)
        except APIError as error:
            try:
                await self._js.consumer_info(STREAM, self._options.durable)
            except NotFoundError:
                raise error from None
            log.warning(
                "the indexer consumer exists with other settings; using it as it is",
                extra={"durable": self._options.durable, "error": str(error)},
            )

    async def stop(self) -> None:
        """Stops pulling, lets running documents finish for up to the drain time, and naks
        whatever is left so another replica takes it at once."""
        self._stopping.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=self._options.drain_seconds)
        for task in list(self._running.values()):
            task.cancel()
        for task in list(self._running.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for held in list(self._holding):
            await self._settle(held, "nak")
        self._followers.clear()
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive_task
            self._keepalive_task = None
        if self._subscription is not None:
            with contextlib.suppress(*_NATS_ERRORS):
                await self._subscription.unsubscribe()
            self._subscription = None

    async def backlog(self) -> int:
        """Events not yet delivered plus delivered ones not yet acknowledged."""
        try:
            info = await self._js.consumer_info(STREAM, self._options.durable)
        except _NATS_ERRORS as error:
            raise Unavailable(f"cannot read the consumer state: {type(error).__name__}") from None
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    async def indexed_total(self) -> int:
        """The consumer's acknowledged floor (a stream position): rises as events are
        indexed, so its rate is the indexing rate."""
        try:
            info = await self._js.consumer_info(STREAM, self._options.durable)
        except _NATS_ERRORS as error:
            raise Unavailable(f"cannot read the consumer state: {type(error).__name__}") from None
        floor = info.ack_floor
        return int(floor.stream_seq or 0) if floor is not None else 0

    # --- the pull loop -----------------------------------------------------------------------

    async def _pull(self) -> None:
        while not self._stopping.is_set():
            free = self._options.concurrency - len(self._running)
            if free <= 0:
                self._slot_freed.clear()
                await _first(self._slot_freed.wait(), self._stopping.wait())
                continue
            try:
                messages = await self._fetch(min(free, self._options.fetch_batch))
            except _NATS_ERRORS:
                if self._stopping.is_set():
                    return  # stopped while the broker was unreachable
                raise
            for message in messages:
                await self._accept(message)

    async def _fetch(self, count: int) -> list[Msg]:
        """Up to `count` messages, [] when none came within FETCH_WAIT_SECONDS. A broker
        error is retried 0.2 s, 0.4 s, ... (at most 5 s) apart until a fetch works, or
        re-raised once the consumer is stopping."""
        assert self._subscription is not None
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(_NATS_ERRORS),
            stop=lambda _: self._stopping.is_set(),
            wait=wait_exponential(multiplier=0.2, max=5.0),
            sleep=self._pause,
            before_sleep=log_before_retry(log, "fetching events failed; retrying"),
            reraise=True,
        ):
            with attempt:
                try:
                    messages = await self._subscription.fetch(count, timeout=FETCH_WAIT_SECONDS)
                except TimeoutError:
                    messages = []
        return messages

    async def _pause(self, seconds: float) -> None:
        """Sleeps, waking early when the consumer is asked to stop."""
        await _first(asyncio.sleep(seconds), self._stopping.wait())

    async def _accept(self, message: Msg) -> None:
        try:
            event = read_event(message.data)
        except UndecodableEvent as error:
            undecodable = _Held(message, None)
            self._holding.add(undecodable)
            await self._dead_letter(undecodable, error.message)
            return
        held = _Held(message, event)
        self._holding.add(held)
        if message.metadata.num_delivered > self._options.max_deliver:
            await self._dead_letter(
                held,
                f"delivered {message.metadata.num_delivered} times: earlier attempts crashed "
                "or timed out",
            )
            return
        key = (event.space_id, event.path)
        if key in self._running:
            self._followers.setdefault(key, []).append(held)
            return
        self._running[key] = asyncio.create_task(self._run(key, event.space, [held]))

    async def _run(self, key: DocumentKey, space: SpaceRef, held: list[_Held]) -> None:
        try:
            while held:
                try:
                    await self._index_through_outages(space, key[1], held)
                except Exception as error:  # noqa: BLE001 - the events are retried or dead-lettered
                    await self._failed(held, error)
                else:
                    observe_lag([h.event for h in held if h.event is not None])
                    for item in held:
                        await self._settle(item, "ack")
                held = self._followers.pop(key, [])
        finally:
            self._running.pop(key, None)
            self._slot_freed.set()

    async def _index_through_outages(
        self, space: SpaceRef, path: str, held: Sequence[_Held]
    ) -> None:
        """Indexes the document, retrying in place while a backend is unavailable (for at
        most `outage_wait_seconds`); other errors, and an outage that outlasts the wait,
        are raised for the nak/dead-letter path."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(Unavailable),
            stop=lambda state: (
                self._stopping.is_set()
                or (state.seconds_since_start or 0.0) >= self._options.outage_wait_seconds
            ),
            wait=wait_exponential(multiplier=0.5, max=self._options.outage_retry_max_seconds),
            sleep=self._pause,
            before_sleep=log_before_retry(log, "a backend is unavailable; indexing waits"),
            reraise=True,
        ):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    OUTAGE_RETRIES.inc()
                await self._worker.index(
                    space,
                    path,
                    traces=_traces(held),
                    named=event_documents(h.event for h in held if h.event is not None),
                )

    async def _failed(self, held: Sequence[_Held], error: Exception) -> None:
        reason = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
        event = held[0].event
        log.warning(
            "indexing failed",
            extra={
                "space_id": event.space_id if event else "",
                "path": event.path if event else "",
                "error": reason,
            },
        )
        for item in held:
            attempt = item.msg.metadata.num_delivered
            if attempt >= self._options.max_deliver:
                await self._dead_letter(item, reason)
            else:
                delay = retry_delay(
                    attempt,
                    base=self._options.retry_base_seconds,
                    cap=self._options.retry_max_seconds,
                )
                await self._settle(item, "nak", delay=delay)

    # --- settling ----------------------------------------------------------------------------

    async def _settle(self, held: _Held, how: str, *, delay: float | None = None) -> None:
        self._holding.discard(held)
        try:
            if how == "ack":
                await held.msg.ack()
            elif how == "term":
                await held.msg.term()
            else:
                await held.msg.nak(delay=delay)
        except nats.errors.MsgAlreadyAckdError:
            pass
        except _NATS_ERRORS as error:
            # The server redelivers it after the ack wait.
            log.warning("settling an event failed", extra={"how": how, "error": repr(error)})

    async def _dead_letter(self, held: _Held, reason: str) -> None:
        """Copies the event to the dead-letter stream and terminates it; if the copy fails,
        naks it to try again later."""
        message = held.msg
        metadata = message.metadata
        headers = {
            # Deduplicates a retried dead-lettering of the same stream message.
            "Nats-Msg-Id": f"{STREAM}-{metadata.sequence.stream}",
            "Engram-Error": reason[:1000],
            "Engram-Subject": message.subject,
            "Engram-Deliveries": str(metadata.num_delivered),
            "Engram-Stream-Sequence": str(metadata.sequence.stream),
        }
        try:
            await self._js.publish(
                DEAD_LETTER_SUBJECT, message.data, stream=DEAD_LETTER_STREAM, headers=headers
            )
        except _NATS_ERRORS as error:
            log.error("dead-lettering an event failed", extra={"error": repr(error)})
            await self._settle(held, "nak", delay=self._options.retry_max_seconds)
            return
        await self._settle(held, "term")
        DEAD_LETTERS.inc()
        log.error(
            "event dead-lettered",
            extra={
                "stream_sequence": metadata.sequence.stream,
                "deliveries": metadata.num_delivered,
                "error": reason,
            },
        )

    async def _keep_alive(self) -> None:
        interval = max(0.5, self._options.ack_wait_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            for held in list(self._holding):
                with contextlib.suppress(*_NATS_ERRORS):
                    await held.msg.in_progress()


class JetStreamReindexQueue:
    """Queues reindex requests as events on `engram.docs.reindex`; what is pending is what
    the indexer's durable consumer (`durable`) has not acknowledged."""

    def __init__(self, publisher: JetStreamPublisher, *, durable: str) -> None:
        self._publisher = publisher
        self._durable = durable

    async def oldest_pending(self) -> datetime | None:
        """The write time of the first message past the consumer's ack floor (the oldest
        one not acknowledged: pending or in flight); None when the consumer has nothing
        left, or does not exist yet."""
        try:
            js = await self._publisher.jetstream()
            try:
                info = await js.consumer_info(STREAM, self._durable)
            except NotFoundError:
                return None
            if not (info.num_pending or info.num_ack_pending):
                return None
            floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
            # Bounded: messages past the floor may have been removed (acknowledged out of
            # order or purged); the first one still there is the oldest not acknowledged.
            for seq in range(int(floor or 0) + 1, int(floor or 0) + 1 + _PENDING_PROBES):
                try:
                    message = await js.get_msg(STREAM, seq)
                except NotFoundError:
                    continue
                try:
                    return read_event(message.data or b"").at
                except UndecodableEvent:
                    return message.time
        except _NATS_ERRORS as error:
            raise Unavailable(f"cannot read the indexer's queue: {type(error).__name__}") from None
        return None

    async def enqueue(self, documents: Sequence[tuple[SpaceRef, str]]) -> None:
        messages = [
            OutboxMessage(
                key=event.event_id,
                event_id=event.event_id,
                subject=REINDEX_SUBJECT,
                payload=encode_event(event),
                trace_context=event.trace_context,
            )
            for event in reindex_events(documents)
        ]
        await self._publisher.publish(messages)


def _traces(held: Sequence[_Held]) -> list[dict[str, str]]:
    """The trace context of each event: its W3C message headers, else the one recorded in
    the event (a message published without them)."""
    carriers = []
    for item in held:
        headers = item.msg.headers or {}
        if "traceparent" in headers:
            carriers.append(
                {k: v for k, v in headers.items() if k in ("traceparent", "tracestate")}
            )
        elif item.event is not None and item.event.trace_context:
            carriers.append(dict(item.event.trace_context))
    return carriers


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Waits until the first of the coroutines is done; cancels the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
