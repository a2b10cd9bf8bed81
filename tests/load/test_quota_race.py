"""200 concurrent writers into a space with 1 MiB left, each adding 10 KiB: usage never
passes the limit, exactly what fits succeeds, and Reconcile finds no drift - on SQLite and
on the MongoDB-protocol server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engram.client import QuotaExceeded, Space
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, secure_deployment
from tests.support.tokens import mint

pytestmark = pytest.mark.load

MIB = 1024 * 1024
CHUNK = 10 * 1024
WRITERS = 200
MEMBER = mint("ann", "acme", "member")
PLATFORM = mint("root", "acme", "admin", platform_admin=True)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_racing_writers_never_pass_the_limit(
    backend: str, tmp_path: Path, real_backends: RealBackends, request: pytest.FixtureRequest
) -> None:
    if backend != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(backend, tmp_path, real_backends) as deployment:
        # retries=0: each writer's one write races, as it would on the wire.
        notes = Space(name="notes")
        storage = deployment.client("storage", MEMBER).with_options(retries=0, space=notes)
        quota = deployment.client("quota", MEMBER).with_options(retries=0)
        platform = deployment.client("quota", PLATFORM).with_options(retries=0)
        # Some usage already there, then a tenant limit leaving exactly 1 MiB.
        await storage.write_document("existing.md", "e" * 5000)
        await platform.set_tenant_quota("acme", 5000 + MIB)
        await asyncio.sleep(2.1)  # the storage process's override cache (2 s) expires
        peak = 0

        async def writer(i: int) -> bool:
            nonlocal peak
            try:
                await storage.write_document(f"race/{i:03d}.md", chr(65 + i % 26) * CHUNK)
            except QuotaExceeded:
                return False
            usage = await quota.quota_usage()
            peak = max(peak, usage.tenant_used_bytes)
            return True

        results = await asyncio.gather(*(writer(i) for i in range(WRITERS)))
        fits = MIB // CHUNK
        assert sum(results) == fits, f"{sum(results)} writes succeeded, {fits} fit"
        usage = await quota.quota_usage()
        assert usage.tenant_used_bytes == 5000 + fits * CHUNK <= usage.tenant_quota_bytes
        assert peak <= usage.tenant_quota_bytes
        listing = await storage.list_documents("race", page_size=1000)
        assert len(listing.entries) == fits, "every refused write left nothing behind"
        report = await platform.reconcile()
        assert report.drifts == (), "counters equal the stored documents"
