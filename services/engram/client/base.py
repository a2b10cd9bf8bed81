"""The client's transport, shared by every service's calls: one channel (opened on the first
call inside the running loop, or handed in by a server's composition root), the bearer
metadata, per-call deadlines, retries on UNAVAILABLE where a repeat is safe, and every
failure raised as its engram.domain.errors class (engram.client.errors, the one mapping).

Each service module (storage, search, quota, authz, indexer, maintenance) is a mixin of
`ClientBase` holding that service's calls, written once: `EngramClient` combines them and the
blocking `Engram` runs the very same coroutines on a private loop.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeAlias, TypeVar, cast

import grpc

from engram.client import mapping
from engram.client.driven import DrivenChannel, blocking_offload, blocking_sleep
from engram.client.errors import domain_error
from engram.client.models import Space
from engram.domain.errors import InvalidArgument, Unavailable
from engram.runtime.channels import (
    Addresses,
    ChannelConfig,
    ClientTls,
    channel_target,
    open_channel,
    open_sync_channel,
)
from engram.v1 import space_pb2

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from engram.client.results.page import Page
    from engram.domain.spaces import SpaceRef

log = logging.getLogger("engram.client")

DEFAULT_ADDR = "127.0.0.1:50051"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# Backoff between attempts: 0.25 s, 0.5 s, 1 s ... capped at 4 s, plus up to 0.25 s jitter.
BACKOFF_INITIAL = 0.25
BACKOFF_MAX = 4.0
# Deadlines by default: `timeout` (30 s) for each unary attempt; an export or import may take
# `stream_timeout` (10 min) as a whole; a watch has none (it runs until the caller stops).
DEFAULT_TIMEOUT = 30.0
DEFAULT_STREAM_TIMEOUT = 600.0

# What a call takes as a space: the client's dataclass, or the domain's SpaceRef (engram's
# own services hold those).
AnySpace: TypeAlias = "Space | SpaceRef"

Request = TypeVar("Request")
Response = TypeVar("Response")
Stub = TypeVar("Stub")
Item = TypeVar("Item")
Offload: TypeAlias = "Callable[..., Awaitable[Any]]"


class _Connection:
    """The channel and its stubs, shared by a client and its `with_options` copies."""

    def __init__(
        self,
        addr: Addresses,
        tls: ClientTls | None,
        channel: grpc.aio.Channel | None,
        *,
        blocking: bool = False,
    ) -> None:
        self.addr = addr
        self.tls = tls
        self.channel = channel
        # A channel handed in belongs to whoever opened it; close() leaves it open.
        self.owned = channel is None
        # On grpc's blocking channel, through DrivenChannel (the blocking client).
        self.blocking = blocking
        self._stubs: dict[object, object] = {}

    @classmethod
    def sharing(cls, other: _Connection) -> _Connection:
        """A connection on `other`'s channel (opened now) and stubs, which never closes it."""
        shared = cls(other.addr, other.tls, other._channel(), blocking=other.blocking)
        shared._stubs = other._stubs
        return shared

    def stub(self, factory: Callable[[grpc.aio.Channel], Stub]) -> Stub:
        found = self._stubs.get(factory)
        if found is None:
            found = self._stubs[factory] = factory(self._channel())
        return cast("Stub", found)

    def _channel(self) -> grpc.aio.Channel:
        if self.channel is None:
            reconnect: list[tuple[str, str | int]] = [
                # Reconnect about as fast as the retries come, so a restarted server is found
                # by the next attempt rather than after grpc's default 1 s+ reconnect backoff.
                ("grpc.initial_reconnect_backoff_ms", int(BACKOFF_INITIAL * 1000)),
                ("grpc.min_reconnect_backoff_ms", int(BACKOFF_INITIAL * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX * 1000)),
            ]
            config = ChannelConfig(tls=self.tls, max_message_bytes=MAX_MESSAGE_BYTES)
            try:
                if self.blocking:
                    opened = open_sync_channel(self.addr, config, reconnect)
                    self.channel = cast("grpc.aio.Channel", DrivenChannel(opened))
                else:
                    self.channel = open_channel(self.addr, config, reconnect)
            except OSError as error:
                raise InvalidArgument(str(error), field="tls") from None
        return self.channel

    async def ready(self, seconds: float) -> bool:
        """Opens the channel (if it is not open) and waits up to `seconds` for it to
        connect; whether it did."""
        channel = self._channel()
        if isinstance(channel, DrivenChannel):
            return channel.ready(seconds)
        try:
            await asyncio.wait_for(channel.channel_ready(), seconds)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        if self.channel is not None and self.owned:
            channel, self.channel = self.channel, None
            self._stubs.clear()
            await channel.close()


# What a retry answers by default: the server or the link is away.
UNAVAILABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
# A call whose repeat applies once (an idempotency key) may also repeat one whose answer
# was lost past its deadline.
UNAVAILABLE_OR_LATE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _unavailable(error: BaseException) -> bool:
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE


def _failed_with(codes: frozenset[grpc.StatusCode]) -> Callable[[BaseException], bool]:
    def check(error: BaseException) -> bool:
        return isinstance(error, grpc.RpcError) and error.code() in codes

    return check


def _log_retry(peer: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        _log_attempt(peer, state.attempt_number, delay)

    return before_sleep


def _log_attempt(peer: str, attempt: int, delay: float) -> None:
    log.warning(
        "%s unavailable (attempt %d), retrying in %.2f s",
        peer,
        attempt,
        delay,
        extra={"peer": peer, "attempt": attempt},
    )


def backoff(attempt: int) -> float:
    """The pause after failed attempt `attempt` (1, 2 ...) of a stream, as tenacity's
    exponential-with-jitter wait gives it to unary calls."""
    import random  # here: seeding it costs every start-up ~3 M instructions

    base: float = BACKOFF_INITIAL * 2 ** (attempt - 1)
    return min(BACKOFF_MAX, base) + random.uniform(0, 0.25)  # noqa: S311 - jitter, not secrets


class ClientBase:
    """What every service's calls stand on; see the module's docstring."""

    def __init__(
        self,
        addr: Addresses = DEFAULT_ADDR,
        *,
        token: str = "",
        space: Space | None = None,
        retries: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
        tls: bool | ClientTls = False,
        channel: grpc.aio.Channel | None = None,
        _blocking: bool = False,
    ) -> None:
        """`addr`: one address or several replicas (see engram.client.aio).
        `tls=True` checks the server's certificate against the system's roots;
        `tls=ClientTls(ca_file=..., cert_file=..., key_file=...)` against a private CA,
        presenting a client certificate for mTLS (with several replicas set
        `ClientTls.server_name` to the name their certificates carry). `channel`: use this
        open grpc.aio channel instead (a server's composition root opens its own, with its
        interceptors); `close()` then leaves it open. `_blocking` (the blocking `Client`
        only): calls go over grpc's blocking channel and never suspend (engram.client.driven)."""
        _check_limits(retries, timeout, stream_timeout)
        try:
            self.target = channel_target(addr)
        except ValueError as error:
            raise InvalidArgument(str(error), field="addr") from None
        self.addr = addr
        self.space = space or Space()
        self.retries = retries
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self._tls = ClientTls() if tls is True else tls or None
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._conn = _Connection(addr, self._tls, channel, blocking=_blocking)
        # How a call waits and does file I/O: on the loop, or (blocking) in the caller.
        self._sleep: Callable[[float], Awaitable[None]] = (
            blocking_sleep if _blocking else asyncio.sleep
        )
        self._offload: Offload = blocking_offload if _blocking else asyncio.to_thread

    def with_options(
        self,
        *,
        timeout: float | None = None,
        stream_timeout: float | None = None,
        retries: int | None = None,
        space: Space | None = None,
    ) -> Self:
        """This client with other defaults, on the same channel: a per-call deadline is
        `client.with_options(timeout=2).read_document(...)`."""
        changed = copy.copy(self)
        changed.timeout = self.timeout if timeout is None else timeout
        changed.stream_timeout = self.stream_timeout if stream_timeout is None else stream_timeout
        changed.retries = self.retries if retries is None else retries
        changed.space = space or self.space
        _check_limits(changed.retries, changed.timeout, changed.stream_timeout)
        return changed

    def as_caller(self, token: str, *, space: Space | None = None) -> Self:
        """This client calling with another bearer token (and default space) over the same
        channel: a server that acts for many callers (hosted `engram mcp`) forwards each
        caller's own token. Closing the copy leaves the shared channel open."""
        caller = self.with_options(space=space)
        caller._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        caller._conn = _Connection.sharing(self._conn)
        return caller

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def wait_ready(self, seconds: float | None = None) -> None:
        """Connects now and waits until the channel is ready, at most `seconds` (the
        client's `timeout` by default); raises Unavailable if it is not. A caller that times
        its calls (a benchmark, a load generator) connects first, so that its first call
        does not pay for the connection. (`seconds`, not an asyncio timeout: the blocking
        client waits with it too.)"""
        wait = self.timeout if seconds is None else seconds
        if not await self._conn.ready(wait):
            raise Unavailable(
                f"{self.target.target}: not connected within {wait:g} s",
                metadata={"code": grpc.StatusCode.UNAVAILABLE.name},
            )

    async def close(self) -> None:
        """Closes the channel it opened; the next call opens a new one."""
        await self._conn.close()

    def _stub(self, factory: Callable[[grpc.aio.Channel], Stub]) -> Stub:
        return self._conn.stub(factory)

    def _space(self, space: AnySpace | None) -> space_pb2.SpaceRef:
        return mapping.space_to_proto(space or self.space)

    async def _call(
        self,
        peer: str,
        call: grpc.aio.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
        *,
        idempotent: bool,
        deadline: float | None = None,
        retry_on: frozenset[grpc.StatusCode] = UNAVAILABLE,
    ) -> Response:
        """One RPC to `peer` ("WorkspaceService.MemoryWrite"), retried on UNAVAILABLE (or
        the `retry_on` codes) when `idempotent`; failures raise as domain errors. The first
        attempt runs without the retry machinery, which only a failure pays for."""
        deadline = deadline or self.timeout
        try:
            return await call(request, metadata=self._metadata, timeout=deadline)
        except grpc.RpcError as error:
            if not (idempotent and self.retries and error.code() in retry_on):
                raise domain_error(error, peer) from None
            first = error
        return await self._retry(peer, call, request, first, deadline, retry_on)

    async def _retry(
        self,
        peer: str,
        call: grpc.aio.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
        first: grpc.RpcError,
        deadline: float,
        retry_on: frozenset[grpc.StatusCode],
    ) -> Response:
        # Imported here: only a failed call pays for tenacity (the CLI's start-up counts).
        from tenacity import (
            AsyncRetrying,
            retry_if_exception,
            stop_after_attempt,
            wait_exponential_jitter,
        )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential_jitter(multiplier=BACKOFF_INITIAL, max=BACKOFF_MAX, jitter=0.25),
            retry=retry_if_exception(_failed_with(retry_on)),
            before_sleep=_log_retry(peer),
            reraise=True,
            sleep=self._sleep,
        )
        failed: grpc.RpcError | None = first
        try:
            async for attempt in retrying:
                with attempt:
                    if failed is not None:  # tenacity's attempt 1 is the one that failed
                        error, failed = failed, None
                        raise error
                    return await call(request, metadata=self._metadata, timeout=deadline)
        except grpc.RpcError as error:
            raise domain_error(error, peer) from None
        raise AssertionError("unreachable: tenacity either returns or reraises")

    async def _stream(
        self,
        peer: str,
        call: grpc.aio.UnaryStreamMultiCallable[Request, Response],
        request: Request,
        *,
        deadline: float | None,
        retry_before_first: bool = False,
    ) -> AsyncIterator[Response]:
        """A server stream's messages. With `retry_before_first`, a stream that fails
        UNAVAILABLE before its first message is opened again (a read nothing was seen of)."""
        attempt = 0
        while True:
            attempt += 1
            received = False
            stream = call(request, metadata=self._metadata, timeout=deadline)
            try:
                async for message in stream:
                    received = True
                    yield message
                return
            except grpc.RpcError as error:
                again = retry_before_first and not received and attempt <= self.retries
                if not (again and _unavailable(error)):
                    raise domain_error(error, peer) from None
            finally:
                stream.cancel()
            delay = backoff(attempt)
            _log_attempt(peer, attempt, delay)
            await self._sleep(delay)

    async def _send_stream(
        self,
        peer: str,
        call: grpc.aio.StreamUnaryMultiCallable[Request, Response],
        requests: AsyncIterator[Request],
        *,
        deadline: float | None,
    ) -> Response:
        """A client stream (never retried: its source may not be read twice)."""
        try:
            return await call(requests, metadata=self._metadata, timeout=deadline)
        except grpc.RpcError as error:
            raise domain_error(error, peer) from None


async def pages(fetch: Callable[[str], Awaitable[Page[Item]]]) -> AsyncIterator[Item]:
    """Every item of a paged listing, fetching the next page as the last one runs out."""
    token = ""
    while True:
        page = await fetch(token)
        for item in page.items:
            yield item
        token = page.next_page_token
        if not token:
            return


def _check_limits(retries: int, timeout: float, stream_timeout: float) -> None:
    if retries < 0:
        raise InvalidArgument("retries must be 0 or more", field="retries")
    if timeout <= 0:
        raise InvalidArgument("timeout must be more than 0 seconds", field="timeout")
    if stream_timeout <= 0:
        raise InvalidArgument("stream_timeout must be more than 0 seconds", field="stream_timeout")


def spaces_to_proto(spaces: Sequence[AnySpace]) -> list[space_pb2.SpaceRef]:
    return [mapping.space_to_proto(space) for space in spaces]
