"""Errors as a caller and as engram's own internal clients see them, on `engram dev --auth`:
the inputs that used to escape as INTERNAL, UNKNOWN or a trailer overflow, and the domain
errors GrpcQuotaGate and the indexer's storage source get back from a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.domain.errors import (
    MAX_MESSAGE_BYTES,
    PermissionDenied,
    QuotaExceeded,
    Unavailable,
)
from engram.domain.spaces import parse_space_id
from engram.indexer.sources import StorageClientDocumentSource
from engram.quota.client import GrpcQuotaGate
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
)
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = pytest.mark.e2e

ADMIN = bearer(mint("ann", "acme", "admin"))
OPERATOR = bearer(mint("root", "acme", "admin", platform_admin=True))
ANN_NOTES = parse_space_id("v1:private:acme::::notes")
QUOTA_PRIVATE = 4096


@pytest.fixture
async def engram(tmp_path: Path) -> AsyncIterator[EmbeddedEngram]:
    settings = server_settings(
        tmp_path / "engram", jwt_secret=TEST_JWT_SECRET, quota_private=QUOTA_PRIVATE
    )
    async with embedded_engram(settings, require_auth=True) as running:
        yield running


@pytest.fixture
async def channel(engram: EmbeddedEngram) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as opened:
        yield opened


def _no_traceback(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.exc_info], "nothing is logged with a traceback"


# --- what used to escape the contract --------------------------------------------------------


async def test_huge_values_are_refused_not_overflowed(channel: grpc.aio.Channel) -> None:
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    failure = await fails(
        storage.WriteDocument(write_request("./" + "x" * 5000 + ".md", "hi"), metadata=ADMIN),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PATH",
    )
    assert "\u2026" in failure.message and len(failure.message.encode()) <= MAX_MESSAGE_BYTES + 3
    authz = authz_pb2_grpc.AuthzServiceStub(channel)
    failure = await fails(
        authz.RevokeToken(authz_pb2.RevokeTokenRequest(token_id="x" * 9000), metadata=ADMIN),
        grpc.StatusCode.NOT_FOUND,
    )
    assert len(failure.message) < 300
    # Multi-byte characters are percent-encoded three bytes each in grpc-message.
    await fails(
        storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space("\U0001f600" * 3000), path="a.md"),
            metadata=ADMIN,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SPACE_REF",
    )


async def test_long_request_id_is_cut_in_the_trailers(channel: grpc.aio.Channel) -> None:
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    call = storage.WriteDocument(
        write_request("a.md", "hi"), metadata=(*ADMIN, ("x-request-id", "r" * 4000))
    )
    await call
    trailers = dict(await call.trailing_metadata())
    assert trailers["x-request-id"] == "r" * 128


async def test_token_ttl_past_timedelta_is_invalid_argument(
    channel: grpc.aio.Channel, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    authz = authz_pb2_grpc.AuthzServiceStub(channel)
    for ttl in (86_400_000_000_000, 2**63 - 1, 366 * 86_400 + 1):
        failure = await fails(
            authz.CreateToken(authz_pb2.CreateTokenRequest(ttl_seconds=ttl), metadata=ADMIN),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert failure.metadata == {} and "ttl_seconds" in failure.message
    created = await authz.CreateToken(
        authz_pb2.CreateTokenRequest(ttl_seconds=366 * 86_400), metadata=ADMIN
    )
    assert created.token
    _no_traceback(capfd, caplog)


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (-62_135_596_801, 0),
        (253_402_300_800, 0),
        (2**63 - 1, 0),
        (-(2**63), 0),
        (0, -1),
        (0, 1_000_000_000),
    ],
)
async def test_audit_since_out_of_range_is_invalid_argument(
    channel: grpc.aio.Channel, seconds: int, nanos: int
) -> None:
    authz = authz_pb2_grpc.AuthzServiceStub(channel)
    request = authz_pb2.ListAuditEventsRequest(since=Timestamp(seconds=seconds, nanos=nanos))
    failure = await fails(
        authz.ListAuditEvents(request, metadata=OPERATOR), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert failure.detail(error_details_pb2.BadRequest).field_violations[0].field == "since"


async def test_audit_since_at_the_bounds_is_accepted(channel: grpc.aio.Channel) -> None:
    authz = authz_pb2_grpc.AuthzServiceStub(channel)
    for seconds, nanos in ((-62_135_596_800, 0), (253_402_300_799, 999_999_999)):
        request = authz_pb2.ListAuditEventsRequest(since=Timestamp(seconds=seconds, nanos=nanos))
        await authz.ListAuditEvents(request, metadata=OPERATOR)


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff",  # not protobuf at all
        b"\x12\x02\xc3\x28",  # field 2 (path) holding invalid UTF-8
        b"\x0a\x09\x0a\x03abc",  # a nested message shorter than its length says
    ],
)
async def test_undecodable_body_is_invalid_argument_without_traceback(
    channel: grpc.aio.Channel,
    body: bytes,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = channel.unary_unary("/engram.v1.StorageService/WriteDocument")
    failure = await fails(
        raw(body, metadata=ADMIN), grpc.StatusCode.INVALID_ARGUMENT, "UNDECODABLE_REQUEST"
    )
    assert "WriteDocumentRequest" in failure.message and len(failure.message) < 200
    unauthenticated = channel.unary_unary("/engram.v1.StorageService/WriteDocument")
    await fails(unauthenticated(body), grpc.StatusCode.UNAUTHENTICATED)
    _no_traceback(capfd, caplog)


async def test_undecodable_stream_message_is_invalid_argument(channel: grpc.aio.Channel) -> None:
    raw = channel.stream_unary("/engram.v1.StorageService/ImportSpace")

    async def messages() -> AsyncIterator[bytes]:
        yield b"\xff\xff"

    await fails(
        raw(messages(), metadata=ADMIN), grpc.StatusCode.INVALID_ARGUMENT, "UNDECODABLE_REQUEST"
    )


async def test_index_status_with_the_vector_backend_down_is_unavailable(
    engram: EmbeddedEngram, channel: grpc.aio.Channel
) -> None:
    indexer = indexer_pb2_grpc.IndexerServiceStub(channel)
    await indexer.GetIndexStatus(indexer_pb2.GetIndexStatusRequest(), metadata=ADMIN)
    await engram.indexing.vector.close()
    await fails(
        indexer.GetIndexStatus(indexer_pb2.GetIndexStatusRequest(), metadata=ADMIN),
        grpc.StatusCode.UNAVAILABLE,
        "INDEX_UNAVAILABLE",
    )


# --- the internal clients --------------------------------------------------------------------


async def test_index_progress_without_a_leg_is_invalid_argument(
    channel: grpc.aio.Channel,
) -> None:
    """GetIndexProgress names the leg it needs, and its key limit, on the wire."""
    stub = indexer_pb2_grpc.IndexerServiceStub(channel)
    search = bearer(service_token("search"))
    failure = await fails(
        stub.GetIndexProgress(indexer_pb2.GetIndexProgressRequest(), metadata=search),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "leg must be INDEX_LEG_KEYWORD or INDEX_LEG_VECTOR" in failure.message
    key = indexer_pb2.IndexProgressKey(space_id="s", path="a.md", document_id="d")
    too_many = indexer_pb2.GetIndexProgressRequest(
        leg=indexer_pb2.INDEX_LEG_VECTOR, documents=[key] * 257
    )
    failure = await fails(
        stub.GetIndexProgress(too_many, metadata=search), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "at most 256 documents" in failure.message


async def test_quota_gate_reports_the_quota_services_errors(channel: grpc.aio.Channel) -> None:
    member = GrpcQuotaGate(channel, mint("ann", "acme", "member"))
    with pytest.raises(PermissionDenied) as denied:
        await member.charge(ANN_NOTES, 10, "key-1")
    assert denied.value.rule == "service_principal_required"

    gate = GrpcQuotaGate(channel, service_token("storage"))
    await gate.charge(ANN_NOTES, 1000, "key-2")
    with pytest.raises(QuotaExceeded) as exceeded:
        await gate.charge(ANN_NOTES, QUOTA_PRIVATE, "key-3")
    assert (exceeded.value.limit_bytes, exceeded.value.used_bytes) == (QUOTA_PRIVATE, 1000)
    assert exceeded.value.requested_bytes == QUOTA_PRIVATE
    usage = await gate.usage(ANN_NOTES)
    assert usage.space_used_bytes == 1000


async def test_quota_gate_with_no_server_is_unavailable(unused_tcp_port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{unused_tcp_port}") as nowhere:
        gate = GrpcQuotaGate(nowhere, service_token("storage"), timeout=2)
        with pytest.raises(Unavailable) as caught:
            await gate.charge(ANN_NOTES, 10, "key-1")
    assert caught.value.metadata["code"] == "UNAVAILABLE"
    assert caught.value.message.startswith("QuotaService.Charge failed: UNAVAILABLE")


async def test_storage_source_reports_the_storage_services_errors(
    channel: grpc.aio.Channel,
) -> None:
    stub = storage_pb2_grpc.StorageServiceStub(channel)
    source = StorageClientDocumentSource(channel, service_token("indexer"))
    assert await source.current(ANN_NOTES, "missing.md") is None
    await stub.WriteDocument(write_request("kept.md", "# kept\n"), metadata=bearer(mint("ann")))
    found = await source.current(ANN_NOTES, "kept.md")
    assert found is not None and found.content == "# kept\n"

    stranger = StorageClientDocumentSource(channel, mint("eve", "globex", "admin"))
    with pytest.raises(PermissionDenied) as denied:
        await stranger.current(ANN_NOTES, "kept.md")
    assert denied.value.rule == "tenant_mismatch"
