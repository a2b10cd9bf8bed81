"""Server limits (issue 13): message sizes; per-principal rate limits on expensive RPCs,
whose store count is atomic (replicas racing on one window admit exactly `limit` calls) and
whose refusal is RESOURCE_EXHAUSTED with google.rpc.RetryInfo for that principal and method
only; the per-principal cap on bytes held by running imports."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.runtime.rate_limit import (
    SCHEMA,
    MongoRateLimitStore,
    RateLimitStore,
    SqliteRateLimitStore,
)
from engram.v1 import search_pb2, search_pb2_grpc, space_pb2, storage_pb2, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.deployments import secure_deployment
from tests.support.grpc_helpers import CallFailure, fails, import_sync, space, write_request
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.contract


@pytest.fixture(params=["sqlite", "mongo"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[RateLimitStore]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "limits.db")
        await database.open([SCHEMA])
        yield SqliteRateLimitStore(database)
        await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    client, mongo = connect(real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}")
    yield MongoRateLimitStore(mongo)
    await client.close()


async def test_racing_hits_admit_exactly_the_limit(store: RateLimitStore) -> None:
    results = await asyncio.gather(*(store.hit("t/ann/m", 7, 5) for _ in range(20)))
    assert sum(results) == 5
    assert await store.hit("t/ann/m", 8, 5), "a new window starts from zero"
    assert await store.hit("t/bob/m", 7, 5), "another key has its own count"


async def test_expensive_calls_past_the_limit_are_resource_exhausted(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    ann, bob = bearer(mint("ann", "acme", "member")), bearer(mint("bob", "acme", "member"))
    async with secure_deployment(  # Search too: every service of `engram dev`
        "sqlite", tmp_path, real_backends, whole_dev=True, rate_limit_per_minute=3
    ) as running:
        storage = storage_pb2_grpc.StorageServiceStub(running.channel("storage"))

        async def export(metadata: tuple[tuple[str, str], ...]) -> None:
            request = storage_pb2.ExportSpaceRequest(space=space())
            async for _ in storage.ExportSpace(request, metadata=metadata):
                pass

        for _ in range(3):
            await export(ann)
        refused = await fails(export(ann), grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")
        assert "ExportSpace is limited to 3 calls per 60 s" in refused.message
        delay = refused.detail(error_details_pb2.RetryInfo).retry_delay
        assert 1 <= delay.seconds <= 60
        await export(bob)  # per principal
        # Cheap calls and narrow searches are not counted.
        await storage.GetUsage(storage_pb2.GetUsageRequest(space=space()), metadata=ann)
        search = search_pb2_grpc.SearchServiceStub(running.channel("storage"))
        narrow = search_pb2.SearchRequest(spaces=[space()], query="x")
        for _ in range(5):
            await search.Search(narrow, metadata=ann)
        wide = search_pb2.SearchRequest(
            spaces=[space(f"s{i}", space_pb2.VISIBILITY_PRIVATE) for i in range(6)],
            query="x",
        )
        for _ in range(3):
            await search.Search(wide, metadata=ann)
        await fails(search.Search(wide, metadata=ann), grpc.StatusCode.RESOURCE_EXHAUSTED)


async def test_import_bytes_in_flight_are_capped_per_principal(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    """ENGRAM_MAX_IMPORT_INFLIGHT_BYTES bounds what one principal's running imports hold:
    past it the import is RESOURCE_EXHAUSTED (nothing written) and the budget is returned."""
    from tests.support import hostile_archives  # noqa: PLC0415

    ann = bearer(mint("ann", "acme", "member"))
    async with secure_deployment(
        "sqlite", tmp_path, real_backends, max_import_inflight_bytes=2 * 1024 * 1024
    ) as running:
        storage = storage_pb2_grpc.StorageServiceStub(running.channel("storage"))
        target = space("imports")

        def archive(size: int) -> Iterator[bytes]:
            return hostile_archives.valid_archive(size, doc_bytes=256 * 1024)

        port = running.ports["storage"]
        refused = await import_sync(port, target, archive(4 * 1024 * 1024), ann)
        assert isinstance(refused, CallFailure)
        assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.message
        assert refused.reason == "IMPORT_IN_FLIGHT_LIMIT"
        assert "ENGRAM_MAX_IMPORT_INFLIGHT_BYTES" in refused.message
        listing = await storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=target, recursive=True), metadata=ann
        )
        assert not listing.entries
        # The refused import gave its bytes back: one that fits goes through.
        accepted = await import_sync(port, target, archive(1024 * 1024), ann)
        assert isinstance(accepted, storage_pb2.ImportSpaceResponse) and accepted.written >= 3


async def test_messages_over_the_configured_size_are_refused(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    ann = bearer(mint("ann", "acme", "member"))
    async with secure_deployment(
        "sqlite", tmp_path, real_backends, max_message_bytes=64 * 1024
    ) as running:
        storage = storage_pb2_grpc.StorageServiceStub(running.channel("storage"))
        await storage.WriteDocument(write_request("small.md", "x" * 1000), metadata=ann)
        # gRPC itself refuses the message (before engram sees it), so no ErrorInfo here.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await storage.WriteDocument(write_request("big.md", "x" * 100_000), metadata=ann)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "65536" in (caught.value.details() or "")
