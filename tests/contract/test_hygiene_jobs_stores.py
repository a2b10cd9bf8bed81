"""The hygiene jobs that read and change the store, on MongoDB (FerretDB from deploy/local)
with storage, quota ledger and repository as `engram serve maintenance` has them (the log
retention scenario also on `engram dev`'s SQLite): what each job changes, and that a second
run changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram.app.embedded import embedded_engram
from engram.backends.mongo import MongoDatabase, connect
from engram.domain.maintenance import LogRetention, SpaceSettings
from engram.domain.principals import LOCAL_ADMIN
from engram.domain.spaces import parse_space_id
from engram.events.jetstream import JetStreamPublisher
from engram.indexer.jetstream_consumer import JetStreamReindexQueue
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.maintenance.hygiene import (
    DuplicateReportJob,
    LogRetentionJob,
    StalenessReportJob,
    UsageReconcileJob,
    VersionPruningJob,
)
from engram.maintenance.ports import Job, MaintenanceDeps
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.service import utc_now
from tests.support.backends import RealBackends
from tests.support.maintenance import (
    StoreDeps,
    content_of,
    log_path,
    maintenance_deps,
    mongo_deps,
    space_state,
    write,
)
from tests.support.settings import server_settings

pytestmark = pytest.mark.contract
real_backend = pytest.mark.real_backend

SPACE = parse_space_id("v1:private:local::::notes")
OTHER = parse_space_id("v1:private:local::::other")
INTERVAL = timedelta(hours=24)

Deps = Callable[..., StoreDeps]


@contextlib.asynccontextmanager
async def mongo_database(real_backends: RealBackends) -> AsyncIterator[MongoDatabase]:
    client, db = connect(real_backends.url("mongo"), f"hygiene_{uuid.uuid4().hex[:10]}")
    try:
        yield db
    finally:
        await client.drop_database(db.name)
        await client.close()


@contextlib.asynccontextmanager
async def mongo_builder(
    database: MongoDatabase, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deps]:
    """Builds MaintenanceDeps on `database` (with these settings and clock); the indexes
    are real but these jobs do not use them."""
    keyword = TantivyKeywordIndex(tmp_path / "keyword")
    vector = NumpyVectorIndex(tmp_path / "vectors")
    publisher = JetStreamPublisher(real_backends.url("nats"), name="engram-maintenance-test")
    await keyword.open()
    await vector.open()

    def build(clock: Callable[[], datetime] = utc_now, **settings: Any) -> StoreDeps:
        return mongo_deps(
            database,
            server_settings(tmp_path / "engram", **settings),
            reindex=JetStreamReindexQueue(publisher, durable="indexer"),
            keyword=keyword,
            vector=vector,
            clock=clock,
        )

    try:
        yield build
    finally:
        await publisher.close()
        await vector.close()
        await keyword.close()


@pytest.fixture
async def database(real_backends: RealBackends) -> AsyncIterator[MongoDatabase]:
    async with mongo_database(real_backends) as db:
        yield db


@pytest.fixture
async def deps(
    database: MongoDatabase, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deps]:
    async with mongo_builder(database, tmp_path, real_backends) as build:
        yield build


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=real_backend)])
async def any_deps(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deps]:
    """`deps` on `engram dev` (SQLite) or on MongoDB."""
    if request.param == "mongo":
        async with (
            mongo_database(real_backends) as db,
            mongo_builder(db, tmp_path, real_backends) as build,
        ):
            yield build
        return
    async with embedded_engram(server_settings(tmp_path / "engram")) as engram:

        def build_dev(clock: Callable[[], datetime] = utc_now) -> StoreDeps:
            return maintenance_deps(engram, clock=clock)

        yield build_dev


async def publish_all(deps: StoreDeps) -> None:
    """What the outbox relay does once events are published (a revision whose event is
    unpublished is kept: it carries the event's payload)."""
    repository = deps.repository
    assert isinstance(repository, MongoDocumentRepository)
    pending = await repository.pending_revisions(10_000)
    await repository.clear_events([event_id for event_id, _ in pending])


async def second_run_changes_nothing(
    deps: MaintenanceDeps, job: Job, settings: SpaceSettings
) -> dict[str, int]:
    before = await space_state(deps, SPACE, indexes=False)
    report = await job.run(SPACE, settings)
    assert await space_state(deps, SPACE, indexes=False) == before
    return dict(report.counts)


async def test_log_retention_archives_and_completes_interrupted_runs(any_deps: Deps) -> None:
    built = any_deps(clock=lambda: datetime(2026, 3, 10, 12, tzinfo=UTC))
    job = LogRetentionJob(built, INTERVAL)
    settings = SpaceSettings(log_retention=LogRetention.ARCHIVE, log_retention_days=30)
    await write(built, SPACE, log_path(2), "recent\n")
    await write(built, SPACE, log_path(45), "old\n")
    # Copied by a run that crashed before the delete; the log grew after the copy.
    await write(built, SPACE, log_path(40), "first\nthen more\n")
    await write(built, SPACE, "archive/" + log_path(40), "first\n")
    # A copy with all of the log, whose delete never happened.
    await write(built, SPACE, log_path(60), "whole\n")
    await write(built, SPACE, "archive/" + log_path(60), "whole\n")
    # Someone else's file where the archive would go.
    await write(built, SPACE, log_path(50), "mine\n")
    await write(built, SPACE, "archive/" + log_path(50), "not a copy\n")

    report = await job.run(SPACE, settings)

    assert report.counts == {"logs_checked": 5, "logs_archived": 3, "logs_skipped": 1}
    assert await content_of(built, SPACE, log_path(2)) == "recent\n"
    for days_ago, content in ((45, "old\n"), (40, "first\nthen more\n"), (60, "whole\n")):
        assert await content_of(built, SPACE, log_path(days_ago)) is None
        assert await content_of(built, SPACE, "archive/" + log_path(days_ago)) == content
    assert await content_of(built, SPACE, log_path(50)) == "mine\n"
    assert await content_of(built, SPACE, "archive/" + log_path(50)) == "not a copy\n"
    usage = await built.service.usage(LOCAL_ADMIN, SPACE)
    stored = await built.repository.space_usage(SPACE.id)
    assert usage.used_bytes == stored.used_bytes, "the quota follows the moves"

    again = await second_run_changes_nothing(built, job, settings)
    assert again == {"logs_checked": 2, "logs_archived": 0, "logs_skipped": 1}


@real_backend
async def test_version_pruning_applies_a_lowered_retention(
    deps: Deps, database: MongoDatabase
) -> None:
    generous = deps(version_retention=5)
    for n in range(1, 10):
        await write(generous, SPACE, "plan.md", f"plan v{n}\n")
    await write(generous, OTHER, "plan.md", "other space\n")
    await publish_all(generous)
    raw = database["revisions"]
    # The write path could not prune while the events were unpublished.
    assert await raw.count_documents({"space_id": SPACE.id}) == 9

    strict = deps(version_retention=2)
    job = VersionPruningJob(strict, INTERVAL)
    report = await job.run(SPACE, SpaceSettings())

    # The current revision and two earlier ones stay.
    assert report.counts == {"versions_pruned": 6}
    assert await raw.count_documents({"space_id": SPACE.id}) == 3
    assert await raw.count_documents({"space_id": SPACE.id, "content": "plan v6\n"}) == 0
    page = await strict.service.list_versions(
        LOCAL_ADMIN, SPACE, "plan.md", page_size=100, page_token=""
    )
    assert [v.version for v in page.items] == [9, 8, 7]
    assert await raw.count_documents({"space_id": OTHER.id}) == 1
    again = await second_run_changes_nothing(strict, job, SpaceSettings())
    assert again == {"versions_pruned": 0}


@real_backend
async def test_usage_reconcile_corrects_the_mongo_ledger(deps: Deps) -> None:
    built = deps()
    await write(built, SPACE, "a.md", "x" * 100)
    await built.quota_service.apply_charge(SPACE, 500, "a-write-that-never-landed")
    job = UsageReconcileJob(built, INTERVAL)

    report = await job.run(SPACE, SpaceSettings())

    assert report.counts == {"spaces_checked": 1, "counters_corrected": 2, "drift_bytes": 1000}
    assert (await built.quota_service.usage(SPACE)).space_used_bytes == 100
    again = await second_run_changes_nothing(built, job, SpaceSettings())
    assert again["counters_corrected"] == 0


@real_backend
async def test_reports_on_mongo_change_nothing(deps: Deps) -> None:
    writer = deps()
    await write(writer, SPACE, "old.md", "Same text.\n")
    await write(writer, SPACE, "copy.md", "Same   text.")
    await write(writer, SPACE, log_path(300), "Same text.\n")
    await asyncio.sleep(0.01)  # new.md is written a clear millisecond later
    await write(writer, SPACE, "new.md", "fresh")
    newest = await writer.repository.get(SPACE.id, "new.md")
    oldest = await writer.repository.get(SPACE.id, "old.md")
    assert newest is not None and oldest is not None and newest.updated_at > oldest.updated_at
    built = deps(clock=lambda: newest.updated_at + timedelta(days=90))

    stale = await StalenessReportJob(built, INTERVAL).run(SPACE, SpaceSettings())
    duplicates = await DuplicateReportJob(built, INTERVAL).run(SPACE, SpaceSettings())

    assert stale.counts == {"documents_checked": 3, "documents_stale": 2}
    assert [line.split(" ")[0] for line in stale.details] == ["copy.md", "old.md"]
    assert duplicates.details == (f"copy.md = {log_path(300)} = old.md",)
    for job in (StalenessReportJob(built, INTERVAL), DuplicateReportJob(built, INTERVAL)):
        await second_run_changes_nothing(built, job, SpaceSettings())
