"""OpenTelemetry tracing: spans for RPCs and for the document event path, exported over OTLP.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set:
then no SDK provider is installed, `enabled()` is False and every helper here is a cheap
no-op (no span objects, no metadata parsing, no client interceptors). When on, the standard
`OTEL_*` variables configure the exporter, batching, sampling and resource; the service name
defaults to `engram-<service>`.

The W3C trace context travels in gRPC metadata (`traceparent`, `tracestate`), in the
DocumentEvent recorded with each write (its `trace_context` map) and in the NATS headers of
its JetStream message, so an indexing run continues the trace of the write it answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from engram.domain.errors import Misconfigured

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

TRACER_NAME = "engram"
# The status codes that mark a server span as failed (OpenTelemetry's gRPC conventions): a
# caller's mistake (INVALID_ARGUMENT, NOT_FOUND, ...) is the server working as intended.
SERVER_ERROR_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
# The carrier keys a trace context may use; anything else in metadata is not read.
_CARRIER_KEYS = ("traceparent", "tracestate", "baggage")

_provider: TracerProvider | None = None
_tracer: Tracer | None = None

TraceContext = tuple[tuple[str, str], ...]


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return _tracer is not None


def configure_tracing(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Installs an SDK tracer provider exporting over OTLP when the standard variables ask
    for it; returns whether tracing is on. `service` names the process (`engram-<service>`
    unless `OTEL_SERVICE_NAME` says otherwise). Idempotent per process."""
    import os

    env = os.environ if environ is None else environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if (
        not endpoint
        or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        or env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none"
    ):
        return False
    if _provider is not None:
        return True
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    # The SDK is imported only when tracing is on: a process without it stays light.
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    from engram import __version__

    exporter: SpanExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    elif protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        exporter = HttpSpanExporter()
    else:
        raise Misconfigured(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: use grpc or http/protobuf"
        )
    attributes: dict[str, str] = {SERVICE_VERSION: __version__}
    if not env.get("OTEL_SERVICE_NAME"):
        attributes[SERVICE_NAME] = f"engram-{service}"
    # The SDK flushes the batch and shuts the exporter down at interpreter exit.
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    return True


def install(provider: TracerProvider) -> None:
    """Records spans through `provider` from now on (configure_tracing, tests, benchmarks);
    also makes it the global provider if none was set."""
    global _provider, _tracer
    _provider = provider
    _tracer = provider.get_tracer(TRACER_NAME)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)


def uninstall() -> None:
    """Stops recording spans in this process (tests and benchmarks switching it off)."""
    global _provider, _tracer
    _provider = None
    _tracer = None


# --- RPCs ------------------------------------------------------------------------------------


def _context_from(carrier: Mapping[str, str]) -> otel_context.Context | None:
    from opentelemetry import propagate

    if "traceparent" not in carrier:
        return None
    return propagate.extract(carrier)


@contextlib.contextmanager
def server_span(method: str, metadata: Sequence[tuple[str, str | bytes]]) -> Iterator[Span | None]:
    """The SERVER span of one call (None when tracing is off), continuing the caller's trace
    from its `traceparent` metadata; current while the handler runs."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    carrier = {
        key: value for key, value in metadata if key in _CARRIER_KEYS and isinstance(value, str)
    }
    service, _, name = method.lstrip("/").rpartition("/")
    # Named as opentelemetry-instrumentation-grpc names its client spans: the full method.
    with tracer.start_as_current_span(
        method,
        context=_context_from(carrier),
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def record_rpc_outcome(
    span: Span, code: grpc.StatusCode, *, reason: str = "", error: BaseException | None = None
) -> None:
    """The call's status on its span: `rpc.grpc.status_code`, the engram error reason, and
    an ERROR status for the codes that mean the server failed."""
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if reason:
        span.set_attribute("engram.error.reason", reason)
    if code in SERVER_ERROR_CODES:
        span.set_status(Status(StatusCode.ERROR, code.name))
        if error is not None:
            span.record_exception(error)


def tracing_client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """Interceptors for an internal client channel: a CLIENT span per call, its context
    sent as `traceparent` metadata. Empty when tracing is off (no per-call cost)."""
    if _provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    interceptors: list[grpc.aio.ClientInterceptor] = aio_client_interceptors(  # type: ignore[no-untyped-call]
        tracer_provider=_provider
    )
    return interceptors


# --- the event path --------------------------------------------------------------------------


def current_trace_context() -> TraceContext:
    """The current span's context as W3C carrier pairs (recorded with a document event);
    empty when tracing is off or no span is current."""
    if _tracer is None or not trace.get_current_span().get_span_context().is_valid:
        return ()
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(sorted(carrier.items()))


@contextlib.contextmanager
def consumer_span(
    name: str,
    carriers: Sequence[Mapping[str, str]],
    attributes: Mapping[str, str | int] | None = None,
) -> Iterator[Span | None]:
    """A CONSUMER span answering events: a child of the first event's trace context, linked
    to every event's (one run may answer several writes). None when tracing is off."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    parent: otel_context.Context | None = None
    links: list[Link] = []
    for carrier in carriers:
        extracted = _context_from(carrier)
        if extracted is None:
            continue
        span_context = trace.get_current_span(extracted).get_span_context()
        if not span_context.is_valid:
            continue
        if parent is None:
            parent = extracted
        links.append(Link(span_context))
    with tracer.start_as_current_span(
        name,
        # No event carried a context: a root span, not a child of whatever is current.
        context=parent if parent is not None else otel_context.Context(),
        kind=SpanKind.CONSUMER,
        links=links,
        attributes=dict(attributes or {}),
    ) as span:
        yield span


def log_ids() -> dict[str, Any]:
    """trace_id and span_id of the current span for a log line; {} when none is active."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return {}
    return {
        "trace_id": format(span_context.trace_id, "032x"),
        "span_id": format(span_context.span_id, "016x"),
    }
