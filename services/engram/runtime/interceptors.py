"""The server interceptor chain: tracing, request id, authentication, error mapping, logs,
metrics.

One interceptor wraps every handler so that each concern happens exactly once per call, in
this order: the call's span (when tracing is on) -> request id -> authentication (principal
into a ContextVar) -> refusing a body that did not decode -> the handler -> domain error to
status -> access log and metrics, then the status and error reason on the span. Health and
reflection skip tracing, authentication, logs and metrics, not the decoding check.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from engram.domain.errors import EngramError, UndecodableRequest
from engram.domain.principals import Principal
from engram.runtime.context import principal_var, request_id_var
from engram.runtime.errors import status_code_for, to_grpc_status
from engram.runtime.metrics import INTERNAL_ERRORS, RPC_SECONDS, RPC_TOTAL
from engram.runtime.rate_limit import RateLimiter
from engram.runtime.tracing import enabled as tracing_enabled
from engram.runtime.tracing import record_rpc_outcome, server_span

log = logging.getLogger("engram.access")

# Health and reflection answer without credentials (probes and grpcurl).
UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
# Methods whose request carries the credential to check; they run without a principal.
CREDENTIAL_IN_REQUEST = frozenset({"/engram.v1.AuthzService/Authenticate"})
# A caller's x-request-id is echoed in the trailers; longer ones are cut.
MAX_REQUEST_ID_CHARS = 128


class Authenticator(Protocol):
    async def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        """Returns the caller's principal or raises Unauthenticated."""
        ...


class _CallState:
    __slots__ = ("method", "started", "code", "anonymous", "reason", "error")

    def __init__(self, method: str) -> None:
        self.method = method
        self.started = time.perf_counter()
        self.code = grpc.StatusCode.OK
        # The engram error reason (ErrorInfo.reason) and the unexpected error, for the span.
        self.reason = ""
        self.error: BaseException | None = None
        # Health and reflection: no credentials, no access log, no metrics.
        self.anonymous = method.startswith(UNAUTHENTICATED_PREFIXES)


@dataclass(frozen=True, slots=True)
class _Status(grpc.Status):
    """A status without details (grpc.Status is an interface with these three fields)."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...] = ()


class _Call:
    """One call as a handler wrapper drives it: `begin` and the handler run inside
    `ServerInterceptor.call`'s block, `refuse` after it (see there why)."""

    __slots__ = ("_chain", "_context", "_request", "metadata", "state", "span", "status")

    def __init__(
        self,
        chain: ServerInterceptor,
        method: str,
        context: grpc.aio.ServicerContext[Any, Any],
        request: Any,
    ) -> None:
        self._chain = chain
        self._context = context
        self._request = request
        self.metadata = tuple(context.invocation_metadata() or ())
        self.state = _CallState(method)
        self.span: Any = None
        # The status a failure ends the call with, once it failed.
        self.status: grpc.Status | None = None

    async def begin(self) -> None:
        """Request id, principal and rate limit, before the handler reads anything."""
        await self._chain.begin(self._context, self.state, self.metadata, self._request)
        self._request = None  # the handler has it; nothing here keeps it past the call
        if self.span is not None:
            self.span.set_attribute("engram.request_id", request_id_var.get())

    async def refuse(self) -> None:
        """Ends a failed call with its status (raises grpc's AbortError); nothing when the
        call did not fail."""
        status, self.status = self.status, None
        if status is not None:
            await self._context.abort_with_status(status)


class _Undecodable:
    """Stands in for a request body that did not decode; the call is refused with it."""

    __slots__ = ("error",)

    def __init__(self, error: UndecodableRequest) -> None:
        self.error = error


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """`deserializer`, returning an _Undecodable instead of raising: grpc would answer a
    raising deserializer with UNKNOWN, the parser's text and a logged traceback."""
    if deserializer is None:
        return None
    message_type = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    name = getattr(message_type, "full_name", "the request message")

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, ValueError):
            return _Undecodable(
                UndecodableRequest(
                    f"the request body does not decode as {name}: corrupt protobuf, or a "
                    "string field that is not UTF-8"
                )
            )

    return decode


def _decoded(request: Any) -> Any:
    if isinstance(request, _Undecodable):
        raise request.error
    return request


async def _decoded_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        yield _decoded(request)


class ServerInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        authenticator: Authenticator,
        *,
        access_log: bool = True,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._authenticator = authenticator
        self._access_log = access_log
        self._limiter = limiter

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _wrap(handler, handler_call_details.method, self)

    # --- the per-call steps ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def call(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any], request: Any
    ) -> AsyncIterator[_Call]:
        """Around one call: its span, then `begin` and the handler inside the block, a
        failure mapped to its status, finish.

        A failure is not raised from here: the status it maps to is kept on the `_Call`,
        and the wrapper aborts with it once this block has closed. An abort raised inside
        the block would carry the failure as its context, with the traceback's frames of
        the handler and everything they held (a refused import's decompressed entries) -
        and grpc keeps the last abort of a server, and a cycle through those frames lives
        until a full collection (issue 29). The failure and its frames are freed as soon as
        the block ends."""
        call = _Call(self, method, context, request)
        state = call.state
        traced = tracing_enabled() and not state.anonymous
        with server_span(method, call.metadata) if traced else _NO_SPAN as span:
            call.span = span
            try:
                yield call
            except grpc.aio.AbortError:
                state.code = _code_of(context)
                raise
            except Exception as error:  # noqa: BLE001 - the one place unexpected errors are mapped
                call.status = self.failure(error, state)
            finally:
                self.finish(state, context)
                if span is not None:
                    record_rpc_outcome(span, state.code, reason=state.reason, error=state.error)

    async def begin(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        state: _CallState,
        metadata: Sequence[tuple[str, str | bytes]],
        request: Any,
    ) -> None:
        """Request id, the principal, and the rate limit (before the handler reads anything;
        `request` is the unary request, or the request stream, unread)."""
        request_id = (
            next((str(value) for key, value in metadata if key == "x-request-id" and value), "")
            or uuid.uuid4().hex
        )[:MAX_REQUEST_ID_CHARS]
        request_id_var.set(request_id)
        context.set_trailing_metadata((("x-request-id", request_id),))
        if state.anonymous or state.method in CREDENTIAL_IN_REQUEST:
            principal_var.set(None)
            return
        principal = await self._authenticator.authenticate(metadata)
        principal_var.set(principal)
        if self._limiter is not None:
            await self._limiter.check(principal, state.method, request)

    def failure(self, error: BaseException, state: _CallState) -> grpc.Status:
        """The status `error` ends the call with; unexpected errors become a bare INTERNAL
        (logged here, with their traceback)."""
        if isinstance(error, EngramError):
            state.code = status_code_for(error)
            state.reason = error.info_reason
            return to_grpc_status(error)
        if isinstance(error, NotImplementedError):
            # A generated servicer base method (e.g. grpc.health.v1.Health/List here).
            state.code = grpc.StatusCode.UNIMPLEMENTED
            return _Status(state.code, f"{state.method} is not implemented by this server")
        state.code = grpc.StatusCode.INTERNAL
        state.error = error
        INTERNAL_ERRORS.labels(state.method).inc()
        log.error("unexpected error", exc_info=error, extra={"method": state.method})
        return _Status(
            grpc.StatusCode.INTERNAL,
            f"internal error; quote request id {request_id_var.get()} when reporting it",
        )

    def finish(self, state: _CallState, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if state.anonymous:
            return
        elapsed = time.perf_counter() - state.started
        code = state.code.name
        RPC_SECONDS.labels(state.method, code).observe(elapsed)
        RPC_TOTAL.labels(state.method, code).inc()
        if self._access_log:
            principal = principal_var.get()
            log.info(
                "rpc",
                extra={
                    "method": state.method,
                    "code": code,
                    "duration_ms": round(elapsed * 1000, 3),
                    "principal": principal.subject if principal else None,
                    "tenant": principal.tenant if principal else None,
                },
            )


# Health and reflection calls: no span.
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def _wrap(
    handler: grpc.RpcMethodHandler[Any, Any], method: str, chain: ServerInterceptor
) -> grpc.RpcMethodHandler[Any, Any]:
    # The grpc stubs type these behaviours loosely; each wrapper keeps the handler's shape.
    decode: Callable[[Any], Any] = _decoded_stream if handler.request_streaming else _decoded
    inner: Any = (
        handler.unary_unary or handler.stream_unary or handler.unary_stream or handler.stream_stream
    )

    async def coroutine(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async with chain.call(method, context, request) as call:
            await call.begin()
            return await inner(decode(request), context)
        # The abort's traceback holds this frame, and grpc keeps the abort in a cycle until a
        # collection: the request (a refused write's whole content) is dropped first.
        del request
        await call.refuse()  # reached only when the call failed
        return None

    async def generator(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async with chain.call(method, context, request) as call:
            await call.begin()
            async for response in inner(decode(request), context):
                yield response
        await call.refuse()

    # A streaming handler is either an async generator or a coroutine that writes through
    # context.write (grpc.health's Watch); each keeps its shape.
    behaviour = generator if inspect.isasyncgenfunction(inner) else coroutine
    make = (
        grpc.unary_unary_rpc_method_handler
        if handler.unary_unary
        else grpc.stream_unary_rpc_method_handler
        if handler.stream_unary
        else grpc.unary_stream_rpc_method_handler
        if handler.unary_stream
        else grpc.stream_stream_rpc_method_handler
    )
    return make(behaviour, _tolerant(handler.request_deserializer), handler.response_serializer)


def _code_of(context: grpc.aio.ServicerContext[Any, Any]) -> grpc.StatusCode:
    code = context.code()
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
