"""Tracing as an operator sees it: a span per RPC with its method, status and engram error
reason; one trace from a write through the outbox (embedded feed, or NATS JetStream) to the
indexer's run; one trace across workspace -> storage; spans exported over OTLP/gRPC to a
collector when OTEL_EXPORTER_OTLP_ENDPOINT is set; the trace id in the JSON log lines."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import grpc
import nats
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from engram.app.embedded import EmbeddedEngram
from engram.app.production import storage_on_mongo
from engram.client import AsyncClient, DocumentNotFound, Space
from engram.domain.documents import space_subject_token
from engram.runtime import tracing
from engram.runtime.logs import JsonFormatter
from engram.v1 import storage_pb2, storage_pb2_grpc
from engram.wire import decode_event
from tests.conftest import EngramFactory
from tests.e2e.test_indexer_jetstream import Deployment, free_port

# Two WorkspaceService processes on MongoDB calling an engram over gRPC (started after `spans`,
# so their client channels trace).
from tests.e2e.test_workspace_processes import replicas  # noqa: F401, F811
from tests.support.backends import RealBackends
from tests.support.grpc_helpers import space, write_request
from tests.support.tokens import mint

pytestmark = pytest.mark.e2e

WRITE = "/engram.v1.StorageService/WriteDocument"
READ = "/engram.v1.StorageService/ReadDocument"
INDEX = "engram.indexer/IndexDocument"
ANN_TOKEN = mint("ann", "acme", "member")
NOTES = Space(name="notes")


@pytest.fixture
async def client(channel: grpc.aio.Channel) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(channel=channel, space=NOTES) as client:
        yield client


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, spans kept in memory (the SDK's own exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str, **attributes: object) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.name == name
        and all((span.attributes or {}).get(k) == v for k, v in attributes.items())
    ]


async def one_span(
    exporter: InMemorySpanExporter, name: str, within: float = 60.0, **attributes: object
) -> ReadableSpan:
    deadline = time.monotonic() + within
    while not (found := named(exporter, name, **attributes)):
        if time.monotonic() > deadline:
            seen = sorted({s.name for s in exporter.get_finished_spans()})
            raise AssertionError(f"no {name} span {attributes} within {within}s; saw {seen}")
        await asyncio.sleep(0.05)
    return found[0]


def trace_of(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def test_an_rpc_on_engram_dev_has_a_server_span(
    spans: InMemorySpanExporter, channel: grpc.aio.Channel
) -> None:
    stub = storage_pb2_grpc.StorageServiceStub(channel)
    await stub.WriteDocument(write_request("a.md", "hello"))
    call = stub.ReadDocument(storage_pb2.ReadDocumentRequest(space=space(), path="a.md"))
    await call
    request_id = dict(await call.trailing_metadata())["x-request-id"]
    read = await one_span(spans, READ)
    assert read.kind == SpanKind.SERVER
    attributes = dict(read.attributes or {})
    assert attributes["rpc.system"] == "grpc"
    assert attributes["rpc.service"] == "engram.v1.StorageService"
    assert attributes["rpc.method"] == "ReadDocument"
    assert attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    assert attributes["engram.request_id"] == request_id
    # Health checks are not traced (probes would drown the real calls).
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("grpc.health")]


async def test_an_error_puts_the_engram_reason_on_the_span(
    spans: InMemorySpanExporter, client: AsyncClient
) -> None:
    with pytest.raises(DocumentNotFound):
        await client.read_document("none.md")
    read = await one_span(spans, READ)
    attributes = dict(read.attributes or {})
    assert attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert attributes["engram.error.reason"] == "DOCUMENT_NOT_FOUND"
    # A caller's mistake is not a server failure (OpenTelemetry's gRPC conventions).
    assert read.status.status_code == StatusCode.UNSET


async def test_a_caller_trace_continues_into_the_server(
    spans: InMemorySpanExporter, engram: EmbeddedEngram
) -> None:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{engram.port}", interceptors=tracing.tracing_client_interceptors()
    ) as channel:
        await AsyncClient(channel=channel, space=NOTES).write_document("b.md", "traced")
    client = [s for s in named(spans, WRITE) if s.kind == SpanKind.CLIENT]
    server = [s for s in named(spans, WRITE) if s.kind == SpanKind.SERVER]
    assert len(client) == 1 and len(server) == 1
    assert trace_of(server[0]) == trace_of(client[0])
    assert server[0].parent is not None and server[0].parent.span_id == span_id(client[0])


async def test_the_json_log_line_carries_the_trace_id(
    spans: InMemorySpanExporter, engram_factory: EngramFactory
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    keep = Keep()
    keep.setFormatter(JsonFormatter())
    access = logging.getLogger("engram.access")
    access.addHandler(keep)
    level = access.level
    access.setLevel(logging.INFO)
    try:
        async with (
            engram_factory(access_log=True) as engram,
            AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client,
        ):
            await client.write_document("c.md", "logged")
    finally:
        access.removeHandler(keep)
        access.setLevel(level)
    write = await one_span(spans, WRITE)
    entries = [json.loads(line) for line in lines]
    logged = [e for e in entries if e.get("method") == WRITE]
    assert logged, entries
    assert logged[0]["trace_id"] == format(trace_of(write), "032x")
    assert logged[0]["span_id"] == format(span_id(write), "016x")


async def test_without_tracing_there_are_no_spans_and_no_trace_ids() -> None:
    assert not tracing.enabled()
    assert tracing.tracing_client_interceptors() == []
    assert tracing.current_trace_context() == ()
    assert tracing.log_ids() == {}


async def test_a_write_trace_reaches_the_embedded_indexer(
    spans: InMemorySpanExporter, client: AsyncClient
) -> None:
    await client.write_document("indexed.md", "the indexer follows this write")
    indexing = await one_span(spans, INDEX, **{"engram.path": "indexed.md"})
    write = await one_span(spans, WRITE)
    assert indexing.kind == SpanKind.CONSUMER
    assert trace_of(indexing) == trace_of(write)
    assert indexing.parent is not None and indexing.parent.span_id == span_id(write)
    assert [link.context.span_id for link in indexing.links] == [span_id(write)]
    assert (indexing.attributes or {})["engram.outcome"] == "indexed"


async def test_a_reindex_call_traces_the_runs_it_queues(
    spans: InMemorySpanExporter, client: AsyncClient
) -> None:
    await client.write_document("again.md", "indexed twice")
    await one_span(spans, INDEX, **{"engram.path": "again.md"})
    await client.reindex([NOTES])
    reindex = await one_span(spans, "/engram.v1.IndexerService/Reindex")
    deadline = time.monotonic() + 60
    while not [s for s in named(spans, INDEX) if trace_of(s) == trace_of(reindex)]:
        assert time.monotonic() < deadline, "no indexing run in the Reindex call's trace"
        await asyncio.sleep(0.05)
    run = next(s for s in named(spans, INDEX) if trace_of(s) == trace_of(reindex))
    assert run.parent is not None and run.parent.span_id == span_id(reindex)


@pytest.mark.real_backend
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
async def test_a_write_trace_reaches_the_indexer_over_jetstream(
    spans: InMemorySpanExporter, tmp_path: Path, real_backends: RealBackends
) -> None:
    deployment = Deployment(tmp_path, real_backends)
    path = f"traced-{uuid.uuid4().hex[:10]}.md"
    nats_client = await nats.connect(deployment.common["nats_url"])
    try:
        async with (
            storage_on_mongo(deployment.storage_settings()) as storage_server,
            deployment.indexer(),
            AsyncClient(
                f"127.0.0.1:{storage_server.port}", token=ANN_TOKEN, space=NOTES
            ) as storage,
        ):
            written = await storage.write_document(path, "carried through NATS")
            indexing = await one_span(spans, INDEX, **{"engram.path": path})
            published = await nats_client.jetstream().get_last_msg(
                "ENGRAM_DOCS",
                f"engram.docs.upsert.{space_subject_token(written.document.space_id)}",
            )
        await nats_client.jetstream().delete_consumer(
            "ENGRAM_DOCS", deployment.indexer_settings.indexer_durable
        )
    finally:
        await nats_client.close()
    assert decode_event(published.data).path == path
    write = await one_span(spans, WRITE)
    assert trace_of(indexing) == trace_of(write)
    assert indexing.parent is not None and indexing.parent.span_id == span_id(write)
    # The JetStream message carries the write's context as a W3C header.
    traceparent = (published.headers or {}).get("traceparent", "")
    assert traceparent.split("-")[1:3] == [
        format(trace_of(write), "032x"),
        format(span_id(write), "016x"),
    ]
    # The indexer read the document back from storage within the same trace.
    reads = [
        s for s in spans.get_finished_spans() if s.name == READ and trace_of(s) == trace_of(write)
    ]
    assert {s.kind for s in reads} == {SpanKind.CLIENT, SpanKind.SERVER}


@pytest.mark.real_backend
async def test_workspace_to_storage_is_one_trace(
    spans: InMemorySpanExporter,
    replicas: list[AsyncClient],  # noqa: F811 - the imported fixture
) -> None:
    await replicas[0].memory_write("hop")
    agent_write = await one_span(spans, "/engram.v1.WorkspaceService/MemoryWrite")
    hop = [s for s in spans.get_finished_spans() if trace_of(s) == trace_of(agent_write)]
    kinds = {(s.name, s.kind) for s in hop}
    assert (WRITE, SpanKind.CLIENT) in kinds and (WRITE, SpanKind.SERVER) in kinds, kinds
    storage_write = next(s for s in hop if s.name == WRITE and s.kind == SpanKind.SERVER)
    client_write = next(s for s in hop if s.name == WRITE and s.kind == SpanKind.CLIENT)
    assert storage_write.parent is not None
    assert storage_write.parent.span_id == span_id(client_write)


@pytest.mark.real_backend
async def test_a_remote_refusal_keeps_its_code_through_a_traced_channel(
    spans: InMemorySpanExporter,
    replicas: list[AsyncClient],  # noqa: F811 - the imported fixture
) -> None:
    with pytest.raises(DocumentNotFound):
        await replicas[0].memory_read("none.md")
    client_read = next(s for s in named(spans, READ) if s.kind == SpanKind.CLIENT)
    storage_read = next(s for s in named(spans, READ) if s.kind == SpanKind.SERVER)
    code = grpc.StatusCode.NOT_FOUND.value[0]
    assert (client_read.attributes or {})["rpc.grpc.status_code"] == code
    assert (storage_read.attributes or {})["engram.error.reason"] == "DOCUMENT_NOT_FOUND"
    assert trace_of(client_read) == trace_of(storage_read)


# --- OTLP export from a real process ---------------------------------------------------------


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver (opentelemetry-proto's service) keeping what it gets."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(  # noqa: N802 - the generated service's method name
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str, str]]:
        """(service.name, span name, trace id hex) of every received span."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in resource_spans.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        found.append((service, span.name, span.trace_id.hex()))
        return found


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, int]]:
    receiver = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield receiver, port
    finally:
        await server.stop(None)


async def wait_for(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.1)


def json_lines(text: str) -> Sequence[dict[str, object]]:
    entries = []
    for line in text.splitlines():
        if line.startswith("{"):
            entries.append(json.loads(line))
    return entries


async def test_engram_dev_exports_spans_over_otlp(
    tmp_path: Path, collector: tuple[Collector, int]
) -> None:
    receiver, collector_port = collector
    port = free_port()
    env = {
        **os.environ,
        "ENGRAM_METRICS_PORT": "0",
        # engram dev logs text by default; the JSON access log carries the trace id.
        "ENGRAM_LOG_FORMAT": "json",
        "ENGRAM_ACCESS_LOG": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited on
        [sys.executable, "-m", "engram", "dev", "--port", str(port), "--data-dir", str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 60)
            await AsyncClient(channel=channel, space=NOTES).write_document("otlp.md", "exported")
        await wait_for(
            lambda: any(name == WRITE for _, name, _ in receiver.spans()),
            30,
            "the write's span at the collector",
        )
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    services = {service for service, _, _ in receiver.spans()}
    assert services == {"engram-dev"}
    write_trace = next(trace for _, name, trace in receiver.spans() if name == WRITE)
    logged = [e for e in json_lines(stderr) if e.get("method") == WRITE]
    assert logged and logged[0]["trace_id"] == write_trace, stderr[-2000:]
