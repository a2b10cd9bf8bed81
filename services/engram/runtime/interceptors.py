"""The server interceptor chain: request id, authentication, error mapping, logs, metrics.

One interceptor wraps every handler so that each concern happens exactly once per call, in
this order: request id -> authentication (principal into a ContextVar) -> the handler ->
domain error to status -> access log and metrics.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

from engram.domain.errors import EngramError
from engram.domain.principals import Principal
from engram.runtime.context import principal_var, request_id_var
from engram.runtime.errors import status_code_for, to_grpc_status
from engram.runtime.metrics import INTERNAL_ERRORS, RPC_SECONDS, RPC_TOTAL

log = logging.getLogger("engram.access")

# Health and reflection answer without credentials (probes and grpcurl).
UNAUTHENTICATED_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
# Methods whose request carries the credential to check; they run without a principal.
CREDENTIAL_IN_REQUEST = frozenset({"/engram.v1.AuthzService/Authenticate"})


class Authenticator(Protocol):
    async def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        """Returns the caller's principal or raises Unauthenticated."""
        ...


class _CallState:
    __slots__ = ("method", "started", "code")

    def __init__(self, method: str) -> None:
        self.method = method
        self.started = time.perf_counter()
        self.code = grpc.StatusCode.OK


class ServerInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authenticator: Authenticator, *, access_log: bool = True) -> None:
        self._authenticator = authenticator
        self._access_log = access_log

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(UNAUTHENTICATED_PREFIXES):
            return handler
        return _wrap(handler, method, self)

    # --- the per-call steps ------------------------------------------------------------------

    async def begin(self, context: grpc.aio.ServicerContext[Any, Any], state: _CallState) -> None:
        metadata = tuple(context.invocation_metadata() or ())
        request_id = (
            next((str(value) for key, value in metadata if key == "x-request-id" and value), "")
            or uuid.uuid4().hex
        )
        request_id_var.set(request_id)
        context.set_trailing_metadata((("x-request-id", request_id),))
        if state.method in CREDENTIAL_IN_REQUEST:
            principal_var.set(None)
            return
        principal_var.set(await self._authenticator.authenticate(metadata))

    async def fail(
        self, error: BaseException, context: grpc.aio.ServicerContext[Any, Any], state: _CallState
    ) -> None:
        """Aborts with the status for `error`; unexpected errors become a bare INTERNAL."""
        if isinstance(error, EngramError):
            state.code = status_code_for(error)
            await context.abort_with_status(to_grpc_status(error))
        state.code = grpc.StatusCode.INTERNAL
        INTERNAL_ERRORS.labels(state.method).inc()
        log.error("unexpected error", exc_info=error, extra={"method": state.method})
        await context.abort(
            grpc.StatusCode.INTERNAL,
            f"internal error; quote request id {request_id_var.get()} when reporting it",
        )

    def finish(self, state: _CallState, context: grpc.aio.ServicerContext[Any, Any]) -> None:
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


def _wrap(
    handler: grpc.RpcMethodHandler[Any, Any], method: str, chain: ServerInterceptor
) -> grpc.RpcMethodHandler[Any, Any]:
    # The grpc stubs type these behaviours loosely; each wrapper keeps the handler's shape.
    if handler.unary_unary or handler.stream_unary:
        inner: Any = handler.unary_unary or handler.stream_unary

        async def unary_response(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            state = _CallState(method)
            try:
                await chain.begin(context, state)
                return await inner(request, context)
            except grpc.aio.AbortError:
                state.code = _code_of(context)
                raise
            except Exception as error:  # noqa: BLE001 - the one place unexpected errors are mapped
                await chain.fail(error, context, state)
            finally:
                chain.finish(state, context)

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                unary_response, handler.request_deserializer, handler.response_serializer
            )
        return grpc.stream_unary_rpc_method_handler(
            unary_response, handler.request_deserializer, handler.response_serializer
        )

    inner_stream: Any = handler.unary_stream or handler.stream_stream

    async def stream_response(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        state = _CallState(method)
        try:
            await chain.begin(context, state)
            async for response in inner_stream(request, context):
                yield response
        except grpc.aio.AbortError:
            state.code = _code_of(context)
            raise
        except Exception as error:  # noqa: BLE001 - the one place unexpected errors are mapped
            await chain.fail(error, context, state)
        finally:
            chain.finish(state, context)

    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            stream_response, handler.request_deserializer, handler.response_serializer
        )
    return grpc.stream_stream_rpc_method_handler(
        stream_response, handler.request_deserializer, handler.response_serializer
    )


def _code_of(context: grpc.aio.ServicerContext[Any, Any]) -> grpc.StatusCode:
    code = context.code()
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
