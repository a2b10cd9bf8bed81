"""JetStreamChangeFeed: the production change feed, read from the ENGRAM_DOCS stream.

Each watch is an ephemeral pull consumer filtered to the space's subjects
(`engram.docs.*.<space token>`; reindex requests on `engram.docs.reindex` never match)
starting at stream sequence cursor + 1, so the stream sequence is the cursor. Messages are
fetched a bounded batch at a time and are not acked (AckNone): the consumer is the watch's
alone and goes away with it (or after `inactive_seconds` if the process died). JetStream keeps
one copy of a re-published event (Nats-Msg-Id), so a change is never seen twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import nats.errors
from google.protobuf.message import DecodeError
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from engram.domain.changes import CAUGHT_UP, FeedItem, FeedStart, change_of
from engram.domain.documents import space_subject_filter
from engram.domain.errors import Unavailable
from engram.events.jetstream import STREAM, connect_nats, ensure_stream
from engram.wire import decode_event

log = logging.getLogger(__name__)

_NATS_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class JetStreamFeedOptions:
    batch_size: int = 256
    # How long one fetch waits for a new change before it asks again.
    fetch_wait_seconds: float = 5.0
    # The server drops a watch's consumer this long after its last fetch (a crashed process).
    inactive_seconds: float = 60.0
    request_timeout_seconds: float = 5.0


class JetStreamChangeFeed:
    """Connects on first use, so storage starts (and writes) while NATS is down; a watch
    then answers UNAVAILABLE until NATS is back."""

    def __init__(
        self, url: str, options: JetStreamFeedOptions = JetStreamFeedOptions(), *, name: str
    ) -> None:
        self._url = url
        self._options = options
        self._name = name
        self._client: Client | None = None
        self._connecting = asyncio.Lock()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(*_NATS_ERRORS):
                await client.close()

    async def _jetstream(self) -> JetStreamContext:
        async with self._connecting:
            if self._client is None:
                # connect_nats keeps trying forever (right for the relay); a watch answers
                # UNAVAILABLE instead and its client retries.
                try:
                    async with asyncio.timeout(self._options.request_timeout_seconds):
                        client = await connect_nats(self._url, name=self._name)
                except TimeoutError:
                    raise Unavailable(
                        f"cannot reach NATS at {self._url} for the change feed; retry later"
                    ) from None
                try:
                    await ensure_stream(client)
                except _NATS_ERRORS as error:
                    await client.close()
                    raise _unavailable(error) from None
                self._client = client
        return self._client.jetstream(timeout=self._options.request_timeout_seconds)

    async def changes(self, space_id: str, start: FeedStart) -> AsyncGenerator[FeedItem, None]:
        js = await self._jetstream()
        name = f"watch-{uuid.uuid4().hex}"
        try:
            state = (await js.stream_info(STREAM)).state
            # An empty stream reports first_seq 0 before its first message.
            after = start.resolve(first=max(state.first_seq, 1), last=state.last_seq)
            consumer = await js.add_consumer(
                STREAM,
                ConsumerConfig(
                    name=name,
                    filter_subject=space_subject_filter(space_id),
                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=after + 1,
                    ack_policy=AckPolicy.NONE,
                    inactive_threshold=self._options.inactive_seconds,
                    mem_storage=True,
                    num_replicas=1,
                ),
            )
        except _NATS_ERRORS as error:
            raise _unavailable(error) from None
        try:
            subscription = await js.pull_subscribe_bind(
                consumer=name,
                stream=STREAM,
                pending_msgs_limit=self._options.batch_size * 4,
            )
        except _NATS_ERRORS as error:
            await _delete(js, name)
            raise _unavailable(error) from None
        try:
            caught_up = not consumer.num_pending
            if caught_up:
                yield CAUGHT_UP
            while True:
                try:
                    messages = await subscription.fetch(
                        self._options.batch_size, timeout=self._options.fetch_wait_seconds
                    )
                except nats.errors.TimeoutError:
                    messages = []
                except _NATS_ERRORS as error:
                    raise _unavailable(error) from None
                for message in messages:
                    sequence = message.metadata.sequence.stream
                    if sequence <= after:
                        continue  # a redelivery: already sent
                    after = sequence
                    try:
                        event = decode_event(message.data)
                    except (DecodeError, KeyError, ValueError):
                        log.warning(
                            "change feed skipped an undecodable event", extra={"seq": sequence}
                        )
                        continue
                    yield change_of(event, sequence)
                # A fetch that found nothing, or whose last message had none behind it.
                if not caught_up and (not messages or messages[-1].metadata.num_pending == 0):
                    caught_up = True
                    yield CAUGHT_UP
        finally:
            with contextlib.suppress(*_NATS_ERRORS):
                await subscription.unsubscribe()
            await _delete(js, name)


async def _delete(js: JetStreamContext, name: str) -> None:
    """Removes the watch's consumer at once (the server would after `inactive_seconds`)."""
    with contextlib.suppress(*_NATS_ERRORS, NotFoundError):
        await js.delete_consumer(STREAM, name)


def _unavailable(error: BaseException) -> Unavailable:
    return Unavailable(
        f"the change feed cannot read JetStream ({type(error).__name__}); retry with the last "
        "cursor"
    )
