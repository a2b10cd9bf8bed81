"""Property-based fuzzing of every RPC `engram dev` serves, with and without `--auth`.

Requests are built from the protobuf descriptors: every field gets random values, boundary
values (empty, 200/513/5000/9000 characters, multi-byte text, int64 and int32 extremes,
NaN, unknown enum numbers, out-of-range timestamps) or values a real client would send,
so that calls also get past validation. Bodies are also sent raw, as bytes that may not
decode at all. For every call:

- the answer is OK or a status engram shaped (ErrorInfo with a reason); never INTERNAL or
  UNKNOWN, never a trailer overflow (RESOURCE_EXHAUSTED "Stream removed"), no traceback;
- every acknowledged write reads back identical (a document or an imported archive as
  written, a created token authenticates as its principal, a tenant quota as set);
- the server still answers health and a write/read afterwards.

`ENGRAM_FUZZ_EXAMPLES` sets the examples per RPC and mode (default 40: about 2,000 typed
and 1,000 raw calls in all); `ENGRAM_FUZZ_EXAMPLES=1000` is a long run.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tarfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.app.embedded import embedded_engram
from engram.domain.errors import MAX_MESSAGE_BYTES
from engram.runtime.errors import received_status
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    indexer_pb2,
    maintenance_pb2,
    quota_pb2,
    quota_pb2_grpc,
    search_pb2,
    space_pb2,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
)
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = [pytest.mark.fuzz, pytest.mark.asyncio(loop_scope="module")]

EXAMPLES = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "40"))
CALL_TIMEOUT = 30.0
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

SERVICE_MODULES = (
    storage_pb2,
    quota_pb2,
    authz_pb2,
    indexer_pb2,
    search_pb2,
    workspace_pb2,
    maintenance_pb2,
    health_pb2,
)
REFLECTION = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
MODES = ("dev", "dev --auth")


# --- the RPCs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    path: str
    request: Descriptor
    response: Descriptor
    client_streaming: bool
    server_streaming: bool
    # Health/reflection answer with grpc's own statuses, not engram's ErrorInfo.
    engram: bool = True

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


def _rpcs() -> list[Rpc]:
    found: list[Rpc] = []
    services = [
        service
        for module in SERVICE_MODULES
        for service in module.DESCRIPTOR.services_by_name.values()
    ]
    for service in [*services, REFLECTION]:
        for method in service.methods:
            found.append(
                Rpc(
                    f"/{service.full_name}/{method.name}",
                    method.input_type,
                    method.output_type,
                    method.client_streaming,
                    method.server_streaming,
                    engram=service.full_name.startswith("engram."),
                )
            )
    return found


RPCS = _rpcs()


def message_class(descriptor: Descriptor) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


# --- values -----------------------------------------------------------------------------------
#
# Each message is drawn sane (every field a value a real client sends, so the call gets
# past validation and writes, reads and searches for real), mixed (sane, with some fields
# wild) or wild (any value of the field's type, boundaries favoured).

ANN_ADMIN = bearer(mint("ann", "acme", "admin"))
SANE_TEXT: dict[str, list[str]] = {
    "path": ["MEMORY.md", "notes/a.md", "daily/2026-01-01.md", "new.md", "d\u00e9j\u00e0.md"],
    "dir": ["", "notes", "daily"],
    "name": ["notes", "shared"],
    "tenant": ["", "acme", "local"],
    "project": ["p1"],
    "bot": ["b1"],
    "user": ["", "ann", "local"],
    "content": ["# Title\n\nbody\n", "hello", "- item\n", "ships on Fridays\n"],
    "expected_sha256": [""],
    "page_token": [""],
    "query": ["release", "ERR_4021", "when do we ship", "title"],
    "path_prefix": ["", "notes/"],
    "idempotency_key": ["k1", "k2", "k3"],
    "description": ["", "ci"],
    "action": ["write", "read"],
    "space_id": ["v1:private:acme::::notes", "v1:private:local::::notes"],
    "token": [ANN_ADMIN[0][1].removeprefix("Bearer "), ""],
    "service": ["", "engram.v1.StorageService"],
}
WILD_TEXT: dict[str, list[str]] = {
    "path": ["./MEMORY.md", "../up.md", "a//b.md", "notes", "x.txt", "e\u0301.md", " a.md"],
    "dir": ["/", "..", "notes/"],
    "tenant": ["globex", "instance"],
    "user": ["eve"],
    "content": ["AKIAIOSFODNN7EXAMPLE", ""],
    "expected_sha256": ["0" * 64, hashlib.sha256(b"hello").hexdigest()],
    "space_id": ["bad", "v1:nope:::::x"],
}
SANE_INTS: dict[str, list[int]] = {
    "page_size": [0, 1, 2, 1000],
    "version": [0, 1, 2],
    "ttl_seconds": [0, 60, 86_400],
    "quota_bytes": [0, 10**6, 2**30],
    "delta_bytes": [1, 100, -100],
    "limit": [0, 3, 10],
    "seconds": [0, 1_700_000_000],
    "nanos": [0, 500],
}
SPACES = [
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="notes"),
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PROJECT, name="notes", project="p1"),
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_ORG, name="notes"),
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_USER, name="notes"),
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_BOT, name="n", project="p1", bot="b1"),
    space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="notes", tenant="acme"),
]
BOUNDARY_TEXT = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["x", "\u00e9", "\U0001f600", "/", "../", "\x00", " ", "a/"]),
    st.sampled_from([1, 128, 129, 200, 201, 512, 513, 5000, 9000]),
)
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = (0, 1, -1, 2, 10, 100, 1000, 1001, low, high, low + 1, high - 1)
    return st.one_of(
        st.sampled_from([v for v in edges if low <= v <= high]),
        st.integers(max(low, -1000), min(high, 100_000)),
        st.integers(low, high),
    )


def _tar(entries: Sequence[tuple[str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in entries:
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _sane(descriptor: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    kind, name = descriptor.type, descriptor.name
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return message_values(descriptor.message_type, depth + 1)
    if kind == FieldDescriptor.TYPE_STRING:
        known = SANE_TEXT.get(name)
        return st.sampled_from(known) if known else st.text("abcdefgh-_", min_size=1, max_size=12)
    if kind == FieldDescriptor.TYPE_BYTES:
        return SANE_ARCHIVES
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in descriptor.enum_type.values if v.number])
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.sampled_from([0.0, 0.25, 0.5, 1.0])
    return st.sampled_from(SANE_INTS.get(name, [0, 1, 2, 10, 100]))


def _wild(descriptor: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    kind, name = descriptor.type, descriptor.name
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return message_values(descriptor.message_type, depth + 1)
    if kind == FieldDescriptor.TYPE_STRING:
        known = SANE_TEXT.get(name, []) + WILD_TEXT.get(name, [])
        plausible = [st.sampled_from(known)] if known else []
        return st.one_of(*plausible, _ANY_TEXT, BOUNDARY_TEXT)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=300), WILD_ARCHIVES)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [value.number for value in descriptor.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.one_of(
            st.sampled_from([0.0, -0.0, 0.5, 1.0, -1.0, 60.0, float("nan"), float("inf")]),
            st.floats(width=64 if kind == FieldDescriptor.TYPE_DOUBLE else 32),
        )
    return _integers(*_INT_RANGES[kind])


def _field(descriptor: FieldDescriptor, depth: int, mode: str) -> st.SearchStrategy[Any]:
    sane, wild = _sane(descriptor, depth), _wild(descriptor, depth)
    single = {"sane": sane, "wild": wild, "mixed": st.one_of(sane, sane, sane, wild)}[mode]
    if descriptor.is_repeated:
        return st.lists(single, min_size=1 if mode == "sane" else 0, max_size=4)
    return single


def message_values(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    cls = message_class(descriptor)
    if depth > 3:
        return st.just(cls())
    if descriptor.full_name == "engram.v1.SpaceRef":
        sane_space = st.sampled_from(SPACES)
    else:
        sane_space = st.nothing()
    fields = descriptor.fields
    sane = st.fixed_dictionaries({f.name: _field(f, depth, "sane") for f in fields})
    mixed = st.fixed_dictionaries({}, optional={f.name: _field(f, depth, "mixed") for f in fields})
    wild = st.fixed_dictionaries({}, optional={f.name: _field(f, depth, "wild") for f in fields})
    built = st.one_of(sane, mixed, wild).map(lambda values: cls(**values))
    return st.one_of(sane_space, sane_space, built)


SANE_ARCHIVES = st.lists(
    st.tuples(st.sampled_from(SANE_TEXT["path"]), st.sampled_from(SANE_TEXT["content"])),
    min_size=1,
    max_size=3,
    unique_by=lambda entry: entry[0],
).map(_tar)
WILD_ARCHIVES = st.lists(
    st.tuples(st.one_of(_ANY_TEXT, st.sampled_from(WILD_TEXT["path"])), _ANY_TEXT), max_size=4
).map(_tar)


# --- callers and the server -------------------------------------------------------------------

CALLERS: list[tuple[tuple[str, str], ...]] = [
    ANN_ADMIN,
    bearer(mint("ann", "acme", "member")),
    bearer(mint("vic", "acme", "viewer")),
    bearer(mint("root", "acme", "admin", platform_admin=True)),
    bearer(service_token("storage")),
    bearer(mint("eve", "globex", "admin")),
    bearer(mint("ann", "acme", "member", ttl=-3600)),
    (("authorization", "Bearer egm_not_a_token"),),
    (("authorization", "Basic YW5uOnB3"),),
    (),
]


@dataclass
class Target:
    channel: grpc.aio.Channel
    auth: bool

    @property
    def owner(self) -> tuple[tuple[str, str], ...]:
        return ANN_ADMIN if self.auth else ()


SEED = {"MEMORY.md": "# Memory\n\nships on Fridays\n", "notes/a.md": "release ERR_4021\n"}


# One server per mode for the whole module: every RPC's fuzzing lands on the state the
# others left, and starting (and indexing on) ~50 servers would cost more than the fuzzing.
@pytest_asyncio.fixture(scope="module", loop_scope="module", params=MODES)
async def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Target]:
    auth = request.param == "dev --auth"
    settings = server_settings(
        tmp_path_factory.mktemp("fuzz"), jwt_secret=TEST_JWT_SECRET, access_log=False
    )
    async with (
        embedded_engram(settings, require_auth=auth) as engram,
        grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel,
    ):
        running = Target(channel, auth)
        storage = storage_pb2_grpc.StorageServiceStub(channel)
        for visibility, project in (
            (space_pb2.VISIBILITY_PRIVATE, ""),
            (space_pb2.VISIBILITY_PROJECT, "p1"),
        ):
            for path, content in SEED.items():
                await storage.WriteDocument(
                    storage_pb2.WriteDocumentRequest(
                        space=space_pb2.SpaceRef(
                            visibility=visibility, name="notes", project=project
                        ),
                        path=path,
                        content=content,
                    ),
                    metadata=running.owner,
                )
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def stays_up(target: Target) -> AsyncIterator[dict[tuple[str, str], str]]:
    """What this test's acknowledged writes left at (space_id, path); after the test the
    server still answers health and a write/read."""
    yield {}
    await _still_serving(target)


async def _still_serving(target: Target) -> None:
    check = target.channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    answer = await check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    storage = storage_pb2_grpc.StorageServiceStub(target.channel)
    ref = space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="after")
    await storage.WriteDocument(
        storage_pb2.WriteDocumentRequest(space=ref, path="alive.md", content="still here"),
        metadata=target.owner,
        timeout=CALL_TIMEOUT,
    )
    read = await storage.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=ref, path="alive.md"),
        metadata=target.owner,
        timeout=CALL_TIMEOUT,
    )
    assert read.document.content == "still here"


# --- calling and judging ----------------------------------------------------------------------


async def _messages(items: Sequence[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def invoke(
    channel: grpc.aio.Channel,
    rpc: Rpc,
    requests: Sequence[Any],
    metadata: tuple[tuple[str, str], ...],
    *,
    raw: bool = False,
) -> tuple[Any, grpc.aio.AioRpcError | None]:
    """Calls `rpc` with `requests` (one unless the client streams); (response, error)."""
    serialize = None if raw else message_class(rpc.request).SerializeToString
    deserialize = None if raw else message_class(rpc.response).FromString
    kwargs: dict[str, Any] = {"metadata": metadata, "timeout": CALL_TIMEOUT}
    try:
        if rpc.client_streaming and rpc.server_streaming:
            call = channel.stream_stream(rpc.path, serialize, deserialize)
            return [r async for r in call(_messages(requests), **kwargs)], None
        if rpc.client_streaming:
            call_in = channel.stream_unary(rpc.path, serialize, deserialize)
            return await call_in(_messages(requests), **kwargs), None
        if rpc.server_streaming:
            call_out = channel.unary_stream(rpc.path, serialize, deserialize)(requests[0], **kwargs)
            responses = []
            async for response in call_out:
                responses.append(response)
                if rpc.name in ("Watch", "WatchSpace"):  # endless streams: one answer is enough
                    call_out.cancel()
                    break
            return responses, None
        return await channel.unary_unary(rpc.path, serialize, deserialize)(
            requests[0], **kwargs
        ), None
    except grpc.aio.AioRpcError as error:
        return None, error


def _could_not_send(rpc: Rpc, error: grpc.aio.AioRpcError) -> bool:
    """The client's own INTERNAL when it writes a stream message after the server has
    already answered (e.g. refused the first message): grpc replaces the server's status
    with "Internal error from Core" on the client side; nothing was sent by the server."""
    return (
        rpc.client_streaming
        and error.code() == grpc.StatusCode.INTERNAL
        and error.details() == "Internal error from Core"
        and "execute_batch" in (error.debug_error_string() or "")
    )


def judge(rpc: Rpc, error: grpc.aio.AioRpcError) -> None:
    """The contract every failed call keeps."""
    if _could_not_send(rpc, error):
        return
    received = received_status(error)
    code = received.code
    said = f"{rpc.path}: {code.name}: {received.message[:300]}"
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), said
    assert code != grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {CALL_TIMEOUT}s: {said}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert received.reason in ("QUOTA_EXCEEDED", "RATE_LIMITED"), f"trailer overflow? {said}"
    assert "Traceback" not in received.message, said
    assert len(received.message.encode()) <= MAX_MESSAGE_BYTES + 3, said
    if rpc.engram:
        assert received.reason, f"no ErrorInfo: {said}"


async def reads_back(
    target: Target,
    stored: dict[tuple[str, str], str],
    rpc: Rpc,
    requests: Sequence[Any],
    response: Any,
    caller: Any,
) -> None:
    """An acknowledged write is stored exactly as acknowledged."""
    storage = storage_pb2_grpc.StorageServiceStub(target.channel)

    async def read(space: space_pb2.SpaceRef, path: str) -> str:
        answer = await storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space, path=path), metadata=caller
        )
        document = answer.document
        assert document.sha256 == hashlib.sha256(document.content.encode()).hexdigest()
        return document.content

    if rpc.name == "WriteDocument":
        request, document = requests[0], response.document
        content = await read(request.space, request.path)
        assert document.sha256 == hashlib.sha256(content.encode()).hexdigest()
        key = (document.space_id, document.path)
        if request.mode == storage_pb2.WRITE_MODE_APPEND:
            expected = stored.get(key, "") + request.content
            assert content == expected if key in stored else content.endswith(request.content)
        else:
            assert content == request.content
        stored[key] = content
    elif rpc.name == "CreateToken":
        authz = authz_pb2_grpc.AuthzServiceStub(target.channel)
        if target.auth:
            principal = (
                await authz.Authenticate(authz_pb2.AuthenticateRequest(token=response.token))
            ).principal
            assert principal.token_id == response.token_id
            assert principal.subject == (requests[0].user or principal.subject)
    elif rpc.name == "SetTenantQuota":
        quota = quota_pb2_grpc.QuotaServiceStub(target.channel)
        usage = await quota.GetUsage(
            quota_pb2.QuotaServiceGetUsageRequest(tenant=response.tenant), metadata=caller
        )
        assert (usage.tenant, usage.tenant_quota_bytes) == (response.tenant, response.quota_bytes)
    elif rpc.name == "ImportSpace":
        first = requests[0]
        data = b"".join(r.data for r in requests)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            entries = {
                member.name.removeprefix("./"): archive.extractfile(member).read().decode()  # type: ignore[union-attr]
                for member in archive
                if member.isfile()
            }
        for entry in response.entries:
            if entry.outcome == storage_pb2.IMPORT_OUTCOME_UNSUPPORTED:
                # Left out (skip_unsupported), with the reason: nothing was stored for it.
                assert entry.stored_path == "" and entry.detail, entry
                continue
            if entry.outcome == storage_pb2.IMPORT_OUTCOME_SKIPPED:
                continue
            assert await read(first.space, entry.stored_path) == entries[entry.path]


# --- the properties ---------------------------------------------------------------------------


ACKNOWLEDGED_WRITES = ("WriteDocument", "ImportSpace", "CreateToken", "SetTenantQuota")


@functools.cache
def _requests(rpc: Rpc) -> st.SearchStrategy[list[Any]]:
    single = message_values(rpc.request)
    if rpc.client_streaming:
        return st.lists(single, min_size=1, max_size=3)
    return single.map(lambda message: [message])


@pytest.mark.parametrize("rpc", RPCS, ids=lambda rpc: rpc.path.lstrip("/"))
@FUZZ_SETTINGS
@given(data=st.data())
async def test_typed_requests(
    target: Target, stays_up: dict[tuple[str, str], str], rpc: Rpc, data: st.DataObject
) -> None:
    requests = data.draw(_requests(rpc), label="requests")
    caller = data.draw(st.sampled_from(CALLERS), label="caller")
    response, error = await invoke(target.channel, rpc, requests, caller)
    if error is not None:
        judge(rpc, error)
    elif rpc.name in ACKNOWLEDGED_WRITES:
        await reads_back(target, stays_up, rpc, requests, response, caller)


@settings(FUZZ_SETTINGS, max_examples=EXAMPLES * 12)
@given(data=st.data())
async def test_raw_bodies(
    target: Target, stays_up: dict[tuple[str, str], str], data: st.DataObject
) -> None:
    """Bytes that may not decode (corrupt wire format, invalid UTF-8 in a string field)."""
    rpc = data.draw(st.sampled_from(RPCS), label="rpc")
    most = 3 if rpc.client_streaming else 1
    bodies = data.draw(st.lists(st.binary(max_size=200), min_size=1, max_size=most))
    caller = data.draw(st.sampled_from(CALLERS), label="caller")
    _, error = await invoke(target.channel, rpc, bodies, caller, raw=True)
    if error is not None:
        judge(rpc, error)


async def test_every_served_service_is_fuzzed(target: Target) -> None:
    """The RPC list above covers what the server lists through reflection."""
    reflection = target.channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        reflection_pb2.ServerReflectionRequest.SerializeToString,
        reflection_pb2.ServerReflectionResponse.FromString,
    )
    answers = [
        answer
        async for answer in reflection(
            _messages([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
    ]
    served = {service.name for service in answers[0].list_services_response.service}
    fuzzed = {rpc.path.split("/")[1] for rpc in RPCS}
    assert served <= fuzzed, served - fuzzed
