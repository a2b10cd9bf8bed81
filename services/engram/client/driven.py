"""The blocking client's transport: grpc's blocking channel dressed as a grpc.aio one, so
the blocking `Client` runs the very coroutines of `AsyncClient` without an event loop.

Every awaitable on this path finishes without suspending: a unary call returns grpc's
blocking answer, a server stream hands out the next message of grpc's blocking iterator,
a client stream reads its requests' async iterator to the end before the call (a blocking
source: bytes, a file, an iterable), and the client's waits and file I/O go through
`blocking_sleep` and `blocking_offload`. `drive` then runs a call's coroutine to its end
with a single `send(None)`: no loop, no thread, no hop between threads (what the earlier
loop-in-a-thread design paid on every call, bench/RESULTS.md).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import grpc

R = TypeVar("R")


def drive(work: Coroutine[Any, Any, R]) -> R:
    """`work`'s result, run to its end in this thread. It must not suspend: on the driven
    transport nothing does, so a suspension is a bug that names itself."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    work.close()
    name = getattr(work, "__qualname__", "a call")
    raise RuntimeError(f"{name} waited on an event loop in the blocking client")


async def blocking_sleep(seconds: float) -> None:
    time.sleep(seconds)  # noqa: ASYNC251 - the blocking client waits in its caller, by design


async def blocking_offload(function: Callable[..., R], *args: Any) -> R:
    return function(*args)


class _Unary:
    def __init__(self, call: grpc.UnaryUnaryMultiCallable) -> None:  # type: ignore[type-arg]
        self._call = call

    async def __call__(self, request: object, **kwargs: Any) -> Any:
        return self._call(request, **kwargs)


class _ServerStream:
    """A call's messages (grpc's blocking iterator) as grpc.aio's call object gives them."""

    def __init__(self, messages: Any) -> None:
        self._messages = messages

    def __aiter__(self) -> _ServerStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._messages)
        except StopIteration:
            raise StopAsyncIteration from None

    def cancel(self) -> bool:
        return bool(self._messages.cancel())


class _UnaryStream:
    def __init__(self, call: grpc.UnaryStreamMultiCallable) -> None:  # type: ignore[type-arg]
        self._call = call

    def __call__(self, request: object, **kwargs: Any) -> _ServerStream:
        return _ServerStream(self._call(request, **kwargs))


class _StreamUnary:
    def __init__(self, call: grpc.StreamUnaryMultiCallable) -> None:  # type: ignore[type-arg]
        self._call = call

    async def __call__(self, requests: AsyncIterator[Any], **kwargs: Any) -> Any:
        return self._call(_blocking_iter(requests), **kwargs)


def _blocking_iter(requests: AsyncIterator[Any]) -> Iterator[Any]:
    """The requests one by one, as grpc's blocking call reads them (each drawn when grpc
    asks, so a large import is never held whole)."""
    while True:
        try:
            yield drive(_next(requests))
        except StopAsyncIteration:
            return


async def _next(requests: AsyncIterator[Any]) -> Any:
    return await anext(requests)


class DrivenChannel:
    """grpc's blocking `channel` with the face of grpc.aio's, for the generated stubs."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._channel = channel

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> _Unary:
        return _Unary(self._channel.unary_unary(method, *args, **kwargs))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> _UnaryStream:
        return _UnaryStream(self._channel.unary_stream(method, *args, **kwargs))

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> _StreamUnary:
        return _StreamUnary(self._channel.stream_unary(method, *args, **kwargs))

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> object:
        return self._channel.stream_stream(method, *args, **kwargs)  # no such RPC in engram

    def ready(self, seconds: float) -> bool:
        """Whether the channel connected within `seconds` (waiting in the caller)."""
        future = grpc.channel_ready_future(self._channel)
        try:
            future.result(timeout=seconds)
        except grpc.FutureTimeoutError:
            future.cancel()
            return False
        return True

    async def close(self) -> None:
        self._channel.close()
