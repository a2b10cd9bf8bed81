"""`engram serve maintenance` on real backends (FerretDB, NATS, OpenSearch, the embedded
vector index): two replicas share one MongoDB, so a job runs once per period between them,
and either replica lists the runs the other made; jobs act through the process's own
StorageService on MongoDB as the maintenance service principal."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.app.production import ProductionMaintenance, open_maintenance, storage_on_mongo
from engram.authz.enforcement import FixedPrincipalAuthenticator
from engram.backends.mongo import connect
from engram.client import AsyncClient, InvalidArgument, Space, SpaceMaintenance
from engram.domain.maintenance import JobOutcome
from engram.domain.principals import LOCAL_ADMIN, MAINTENANCE
from engram.maintenance.ports import Job, MaintenanceDeps
from engram.runtime.settings import Settings
from engram.storage.mongo_repository import MongoDocumentRepository
from tests.support.backends import RealBackends
from tests.support.maintenance_jobs import UsageSnapshotJob
from tests.support.settings import server_settings

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

SPACES = ["alpha", "beta", "gamma"]
ALPHA = Space(name="alpha")


def _jobs(deps: MaintenanceDeps) -> list[Job]:
    return [UsageSnapshotJob(deps)]


@pytest.fixture
def settings(tmp_path: Path, real_backends: RealBackends) -> Settings:
    run = uuid.uuid4().hex[:10]
    return server_settings(
        tmp_path / "maintenance",
        mongo_uri=real_backends.url("mongo"),
        mongo_db=f"maintenance_{run}",
        nats_url=real_backends.url("nats"),
        opensearch_url=real_backends.url("opensearch"),
        opensearch_index=f"m{run}-chunks",
        opensearch_replicas=0,
        vector_dir=tmp_path / "vectors",
    )


@pytest.fixture
async def replicas(settings: Settings) -> AsyncIterator[list[ProductionMaintenance]]:
    admin = FixedPrincipalAuthenticator(LOCAL_ADMIN)
    assert settings.mongo_uri is not None
    async with storage_on_mongo(settings, publish_events=False, authenticator=admin) as storage:
        async with AsyncClient(f"127.0.0.1:{storage.port}") as client:
            for name in SPACES:
                await client.write_document("MEMORY.md", f"# {name}", space=Space(name=name))
    try:
        async with (
            open_maintenance(settings, authenticator=admin, jobs=_jobs) as first,
            open_maintenance(settings, authenticator=admin, jobs=_jobs) as second,
        ):
            yield [first, second]
    finally:
        client, _ = connect(settings.mongo_uri.get_secret_value(), settings.mongo_db)
        await client.drop_database(settings.mongo_db)
        await client.close()


async def test_replicas_run_each_job_once_and_share_the_record(
    replicas: list[ProductionMaintenance],
) -> None:
    first, second = replicas
    assert first.deps.principal == MAINTENANCE
    assert isinstance(first.deps.repository, MongoDocumentRepository)
    ticks = await asyncio.gather(first.maintenance.worker.tick(), second.maintenance.worker.tick())
    runs = [run for tick in ticks for run in tick]
    assert sorted(run.space.name for run in runs) == SPACES, "once per space between them"
    assert all(run.outcome is JobOutcome.SUCCEEDED for run in runs)
    assert all(run.counts["documents"] == 1 for run in runs), "read from MongoDB storage"
    assert await first.maintenance.worker.tick() == []
    async with AsyncClient(f"127.0.0.1:{second.server.port}", space=ALPHA) as client:
        listed = await client.list_job_runs(all_spaces=True)
        assert sorted(run.run_id for run in listed.items) == sorted(run.run_id for run in runs)
        ran = await client.run_job("usage_snapshot")
        assert ran.outcome == "succeeded" and ran.on_demand
        assert ran.counts["documents"] == 1
        with pytest.raises(InvalidArgument):
            await client.run_job("dream")
        await client.set_space_maintenance(SpaceMaintenance(dream_enabled=True))
    async with AsyncClient(f"127.0.0.1:{first.server.port}", space=ALPHA) as client:
        got = await client.get_space_maintenance()
        assert got.dream_enabled, "settings are shared by the replicas"
