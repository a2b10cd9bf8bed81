"""`engram serve maintenance` on real backends (FerretDB, NATS, OpenSearch, the embedded
vector index): two replicas share one MongoDB, so a job runs once per period between them,
and either replica lists the runs the other made; jobs act through StorageService (on a
database of its own) as the maintenance service principal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.app.production import ProductionMaintenance
from engram.client import AsyncClient, InvalidArgument, Space, SpaceMaintenance
from engram.domain.maintenance import JobOutcome
from engram.domain.principals import MAINTENANCE
from engram.maintenance.ports import Job, MaintenanceDeps
from engram.maintenance.remote_storage import RemoteStorage
from tests.support.backends import RealBackends
from tests.support.maintenance_jobs import UsageSnapshotJob
from tests.support.owned_data import owned_data
from tests.support.tokens import mint

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

SPACES = ["alpha", "beta", "gamma"]
# Lists every space's runs; its team (acme) owns the spaces.
PLATFORM_ADMIN = mint("root", "acme", "admin", platform_admin=True)
ALPHA = Space(name="alpha")


def _jobs(deps: MaintenanceDeps) -> list[Job]:
    return [UsageSnapshotJob(deps)]


@pytest.fixture
async def replicas(
    tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[list[ProductionMaintenance]]:
    """Two maintenance replicas on one database of their own, acting through StorageService
    and QuotaService (each on its own database too)."""
    async with owned_data(tmp_path, real_backends) as running:
        assert running.storage is not None
        async with running.client(running.storage.port) as client:
            for name in SPACES:
                await client.write_document("MEMORY.md", f"# {name}", space=Space(name=name))
        async with (
            running.maintenance(jobs=_jobs) as first,
            running.maintenance(jobs=_jobs) as second,
        ):
            yield [first, second]


async def test_replicas_run_each_job_once_and_share_the_record(
    replicas: list[ProductionMaintenance],
) -> None:
    first, second = replicas
    assert first.deps.principal == MAINTENANCE
    assert isinstance(first.deps.storage, RemoteStorage)
    ticks = await asyncio.gather(first.maintenance.worker.tick(), second.maintenance.worker.tick())
    runs = [run for tick in ticks for run in tick]
    assert sorted(run.space.name for run in runs) == SPACES, "once per space between them"
    assert all(run.outcome is JobOutcome.SUCCEEDED for run in runs)
    assert all(run.counts["documents"] == 1 for run in runs), "listed through StorageService"
    assert await first.maintenance.worker.tick() == []
    async with AsyncClient(
        f"127.0.0.1:{second.server.port}", space=ALPHA, token=PLATFORM_ADMIN
    ) as client:
        listed = await client.list_job_runs(all_spaces=True)
        assert sorted(run.run_id for run in listed.items) == sorted(run.run_id for run in runs)
        ran = await client.run_job("usage_snapshot")
        assert ran.outcome == "succeeded" and ran.on_demand
        assert ran.counts["documents"] == 1
        with pytest.raises(InvalidArgument):
            await client.run_job("dream")
        await client.set_space_maintenance(SpaceMaintenance(dream_enabled=True))
    async with AsyncClient(
        f"127.0.0.1:{first.server.port}", space=ALPHA, token=PLATFORM_ADMIN
    ) as client:
        got = await client.get_space_maintenance()
        assert got.dream_enabled, "settings are shared by the replicas"
