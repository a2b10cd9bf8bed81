"""200 concurrent writers into a space with 1 MiB left, each adding 10 KiB: usage never
passes the limit, exactly what fits succeeds, and Reconcile finds no drift - on SQLite and
on the MongoDB-protocol server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from engram.v1 import quota_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, secure_deployment
from tests.support.grpc_helpers import space, write_request
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.load

MIB = 1024 * 1024
CHUNK = 10 * 1024
WRITERS = 200
MEMBER = bearer(mint("ann", "acme", "member"))
PLATFORM = bearer(mint("root", "acme", "admin", platform_admin=True))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_racing_writers_never_pass_the_limit(
    backend: str, tmp_path: Path, real_backends: RealBackends, request: pytest.FixtureRequest
) -> None:
    if backend != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(backend, tmp_path, real_backends) as deployment:
        storage, quota = deployment.storage(), deployment.quota()
        # Some usage already there, then a tenant limit leaving exactly 1 MiB.
        await storage.WriteDocument(write_request("existing.md", "e" * 5000), metadata=MEMBER)
        await quota.SetTenantQuota(
            quota_pb2.SetTenantQuotaRequest(tenant="acme", quota_bytes=5000 + MIB),
            metadata=PLATFORM,
        )
        await asyncio.sleep(2.1)  # the storage process's override cache (2 s) expires
        peak = 0

        async def writer(i: int) -> bool:
            nonlocal peak
            try:
                await storage.WriteDocument(
                    write_request(f"race/{i:03d}.md", chr(65 + i % 26) * CHUNK), metadata=MEMBER
                )
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
                return False
            usage = await quota.GetUsage(quota_pb2.QuotaServiceGetUsageRequest(), metadata=MEMBER)
            peak = max(peak, usage.tenant_used_bytes)
            return True

        results = await asyncio.gather(*(writer(i) for i in range(WRITERS)))
        fits = MIB // CHUNK
        assert sum(results) == fits, f"{sum(results)} writes succeeded, {fits} fit"
        usage = await quota.GetUsage(quota_pb2.QuotaServiceGetUsageRequest(), metadata=MEMBER)
        assert usage.tenant_used_bytes == 5000 + fits * CHUNK <= usage.tenant_quota_bytes
        assert peak <= usage.tenant_quota_bytes
        listing = await storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=space(), dir="race", page_size=1000),
            metadata=MEMBER,
        )
        assert len(listing.entries) == fits, "every refused write left nothing behind"
        report = await quota.Reconcile(quota_pb2.ReconcileRequest(), metadata=PLATFORM)
        assert list(report.drifts) == [], "counters equal the stored documents"
