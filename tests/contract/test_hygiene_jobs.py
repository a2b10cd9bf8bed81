"""The hygiene jobs on `engram dev`'s real services (SQLite, tantivy, the embedded vector
index, the outbox-fed indexer): what each job changes on real data, and that a second run
right after changes nothing. (Interrupted archives: test_hygiene_jobs_stores.py, on SQLite
and MongoDB.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.domain.chunks import Chunk
from engram.domain.maintenance import JobReport, LogRetention, SpaceSettings
from engram.domain.principals import LOCAL_ADMIN
from engram.domain.spaces import parse_space_id
from engram.maintenance.hygiene import (
    DuplicateReportJob,
    EmbeddingBackfillJob,
    LogRetentionJob,
    StalenessReportJob,
    UsageReconcileJob,
    VersionPruningJob,
    hygiene_jobs,
)
from engram.maintenance.ports import Job
from tests.e2e.test_indexer_embedded import expected_chunks as indexer_expected_chunks
from tests.support.maintenance import content_of, log_path, maintenance_deps, space_state, write
from tests.support.settings import server_settings

pytestmark = pytest.mark.contract

SPACE = parse_space_id("v1:private:local::::notes")
OTHER = parse_space_id("v1:private:local::::other")
DAY = timedelta(days=1)
INTERVAL = timedelta(hours=24)


@contextlib.asynccontextmanager
async def engram_dev(tmp_path: Path, **settings: Any) -> AsyncIterator[EmbeddedEngram]:
    async with embedded_engram(server_settings(tmp_path / "engram", **settings)) as engram:
        yield engram


def fixed(at: datetime) -> Callable[[], datetime]:
    return lambda: at


async def second_run_changes_nothing(
    engram: EmbeddedEngram, job: Job, settings: SpaceSettings
) -> JobReport:
    deps = maintenance_deps(engram)
    assert await engram.relay.drained(60)
    before = await space_state(deps, SPACE)
    report = await job.run(SPACE, settings)
    assert await engram.relay.drained(60)
    assert await space_state(deps, SPACE) == before
    return report


# --- the job list ------------------------------------------------------------------------------


async def test_hygiene_jobs_are_the_six_named_jobs_on_one_interval(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        jobs = hygiene_jobs(maintenance_deps(engram), timedelta(hours=6))
    assert [job.name for job in jobs] == [
        "log_retention",
        "version_pruning",
        "embedding_backfill",
        "usage_reconcile",
        "staleness_report",
        "duplicate_report",
    ]
    defaults = SpaceSettings()
    assert all(job.interval(defaults) == timedelta(hours=6) for job in jobs)
    # Seed 000's hygiene is on by default: log retention archives past 60 daily logs, and
    # every job runs on every space unless a space turns retention off.
    assert defaults.log_retention is LogRetention.ARCHIVE and defaults.max_daily_logs == 60
    assert all(job.scheduled(defaults) for job in jobs)
    off = SpaceSettings(log_retention=LogRetention.OFF)
    assert [job.name for job in jobs if not job.scheduled(off)] == ["log_retention"]


# --- log retention -----------------------------------------------------------------------------


async def test_log_retention_archives_old_logs_and_they_stay_searchable(tmp_path: Path) -> None:
    settings = SpaceSettings(log_retention=LogRetention.ARCHIVE, max_daily_logs=2)
    async with engram_dev(tmp_path) as engram:
        job = LogRetentionJob(
            maintenance_deps(engram, clock=fixed(datetime(2026, 3, 10, 12, tzinfo=UTC))), INTERVAL
        )
        for days_ago in (0, 2, 3, 4, 5):
            await write(
                engram, SPACE, log_path(days_ago), f"# Log\n\n[09:00:00] marker{days_ago}x\n"
            )
        await write(engram, SPACE, "daily/2026-03-07-cli.md", "[10:00:00] session log marker3cli\n")
        # An imported OpenClaw/Minara journal is a log of its day too; memory/ notes are not.
        await write(engram, SPACE, "memory/2026-03-01.md", "[08:00:00] imported marker9x\n")
        await write(engram, SPACE, "memory/projects.md", "# Projects\n")
        await write(engram, SPACE, "MEMORY.md", "# Memory\n")

        report = await job.run(SPACE, settings)

        # Newest two logs stay (today's and 2 days ago); the other five move.
        assert report.counts == {"logs_checked": 7, "logs_archived": 5, "logs_skipped": 0}
        assert await content_of(engram, SPACE, "archive/memory/2026-03-01.md") is not None
        assert await content_of(engram, SPACE, "memory/2026-03-01.md") is None
        assert await content_of(engram, SPACE, "memory/projects.md") == "# Projects\n"
        for days_ago in (0, 2):
            assert await content_of(engram, SPACE, log_path(days_ago)) is not None
        for days_ago in (3, 4, 5):
            assert await content_of(engram, SPACE, log_path(days_ago)) is None
            assert await content_of(engram, SPACE, "archive/" + log_path(days_ago)) == (
                f"# Log\n\n[09:00:00] marker{days_ago}x\n"
            )
        assert await content_of(engram, SPACE, "archive/daily/2026-03-07-cli.md") is not None
        assert f"{log_path(5)} -> archive/{log_path(5)}" in report.details
        assert await content_of(engram, SPACE, "MEMORY.md") == "# Memory\n"
        # The archived copy is indexed like any document; the original's chunks are gone.
        assert await engram.relay.drained(60)
        hits = await engram.indexing.keyword.search([SPACE.id], "marker4x", limit=5)
        assert [hit.chunk.path for hit in hits] == [f"archive/{log_path(4)}"]

        again = await second_run_changes_nothing(engram, job, settings)
        assert again.counts["logs_archived"] == 0


async def test_log_retention_deletes_by_age_and_does_nothing_when_off(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        deps = maintenance_deps(engram, clock=fixed(datetime(2026, 3, 10, tzinfo=UTC)))
        job = LogRetentionJob(deps, INTERVAL)
        for days_ago in (5, 31, 45):
            await write(engram, SPACE, log_path(days_ago), f"entry {days_ago}\n")
        off = await job.run(SPACE, SpaceSettings(log_retention=LogRetention.OFF))
        assert off.counts == {} and "off" in off.message
        assert await content_of(engram, SPACE, log_path(45)) is not None

        settings = SpaceSettings(log_retention=LogRetention.DELETE, log_retention_days=30)
        report = await job.run(SPACE, settings)

        assert report.counts == {"logs_checked": 3, "logs_deleted": 2, "logs_skipped": 0}
        assert await content_of(engram, SPACE, log_path(5)) == "entry 5\n"
        assert await content_of(engram, SPACE, log_path(31)) is None
        assert await content_of(engram, SPACE, f"archive/{log_path(31)}") is None
        # A delete keeps the content as a version until pruned or purged.
        kept = await engram.repository.list_versions(
            SPACE.id, log_path(31), before_seq=None, limit=5
        )
        assert [v.deleted for v in kept] == [True]
        usage = await engram.storage.usage(LOCAL_ADMIN, SPACE)
        assert usage.used_bytes == len("entry 5\n"), "the quota is credited"

        await second_run_changes_nothing(engram, job, settings)


# --- version pruning ---------------------------------------------------------------------------


async def test_version_pruning_applies_a_lowered_retention(tmp_path: Path) -> None:
    async with engram_dev(tmp_path, version_retention=5) as engram:
        for n in range(1, 10):
            await write(engram, SPACE, "plan.md", f"plan v{n}\n")
        await write(engram, SPACE, "short.md", "one\n")
    async with engram_dev(tmp_path, version_retention=2) as engram:
        before = await engram.storage.list_versions(
            LOCAL_ADMIN, SPACE, "plan.md", page_size=100, page_token=""
        )
        assert [v.version for v in before.items] == [9, 8, 7, 6, 5, 4]
        job = VersionPruningJob(maintenance_deps(engram), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {"versions_pruned": 3}
        after = await engram.storage.list_versions(
            LOCAL_ADMIN, SPACE, "plan.md", page_size=100, page_token=""
        )
        assert [v.version for v in after.items] == [9, 8, 7]
        read, _ = await engram.storage.read(LOCAL_ADMIN, SPACE, "plan.md")
        assert read.content == "plan v9\n"
        again = await second_run_changes_nothing(engram, job, SpaceSettings())
        assert again.counts == {"versions_pruned": 0}


# --- embedding backfill ------------------------------------------------------------------------


async def expected_chunks(engram: EmbeddedEngram, path: str) -> list[Chunk]:
    return await indexer_expected_chunks(engram, SPACE.id, path)


async def test_embedding_backfill_requeues_what_the_indexes_miss(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        keyword, vector = engram.indexing.keyword, engram.indexing.vector
        model = await vector.active_model()
        assert model is not None
        for path in ("a.md", "b.md", "c.md", "ok.md"):
            await write(engram, SPACE, path, f"# {path}\n\nNotes about {path} and the deploy.\n")
        await write(engram, SPACE, "blank.md", "   \n")
        assert await engram.relay.drained(60)
        # The walk runs a minute later: a document written in the last 30 s is late (its
        # event may still be on its way), not missing.
        later = maintenance_deps(engram, clock=lambda: datetime.now(UTC) + timedelta(minutes=1))
        job = EmbeddingBackfillJob(later, INTERVAL)
        assert (await job.run(SPACE, SpaceSettings())).counts["documents_requeued"] == 0

        # Lost from the keyword index; chunks without vectors; an older version held;
        # chunks of a document the store does not have.
        await keyword.delete_chunks(SPACE.id, "a.md")
        await vector.delete_chunks(SPACE.id, "b.md")
        stale = [
            Chunk(
                c.chunk_id, c.document_id, c.space_id, c.tenant, c.path, c.chunk_index, 0, c.content
            )
            for c in await expected_chunks(engram, "c.md")
        ]
        await keyword.delete_chunks(SPACE.id, "c.md")
        await keyword.replace_chunks(SPACE.id, "c.md", stale)
        ghost = Chunk("ghost:0", "ghost", SPACE.id, SPACE.tenant, "ghost.md", 0, 1, "boo")
        await keyword.replace_chunks(SPACE.id, "ghost.md", [ghost])
        await write(engram, OTHER, "other.md", "another space")
        assert await engram.relay.drained(60)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 5,
            "documents_requeued": 4,
            "documents_pending": 0,
        }
        assert sorted(line.split(":")[0] for line in report.details) == [
            "a.md",
            "b.md",
            "c.md",
            "ghost.md",
        ]
        assert await engram.relay.drained(60)
        for path in ("a.md", "b.md", "c.md"):
            expected = await expected_chunks(engram, path)
            assert await keyword.chunks_of(SPACE.id, path) == expected
            assert await vector.chunks_of(SPACE.id, path) == expected
        assert await keyword.chunks_of(SPACE.id, "ghost.md") == []

        again = await second_run_changes_nothing(engram, job, SpaceSettings())
        assert again.counts == {
            "documents_checked": 5,
            "documents_requeued": 0,
            "documents_pending": 0,
        }


# --- usage reconcile ---------------------------------------------------------------------------


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_usage_reconcile_corrects_drift_and_counts_it(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        await write(engram, SPACE, "a.md", "x" * 100)
        await write(engram, OTHER, "b.md", "y" * 50)
        # Counters drifted from the documents (a charge whose write never landed).
        await engram.quota.apply_charge(SPACE, 1000, "lost-write")
        assert (await engram.quota.usage(SPACE)).space_used_bytes == 1100
        job = UsageReconcileJob(maintenance_deps(engram), INTERVAL)
        counters_before = metric("engram_maintenance_usage_drift_counters_total")
        bytes_before = metric("engram_maintenance_usage_drift_bytes_total")

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {"spaces_checked": 2, "counters_corrected": 2, "drift_bytes": 2000}
        assert (await engram.quota.usage(SPACE)).space_used_bytes == 100
        assert (await engram.quota.usage(SPACE)).aggregate_used_bytes == 150
        assert metric("engram_maintenance_usage_drift_counters_total") - counters_before == 2
        assert metric("engram_maintenance_usage_drift_bytes_total") - bytes_before == 2000
        again = await second_run_changes_nothing(engram, job, SpaceSettings())
        assert again.counts["counters_corrected"] == 0 and again.counts["drift_bytes"] == 0


# --- reports -----------------------------------------------------------------------------------


async def test_staleness_report_lists_old_documents_and_changes_nothing(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        await write(engram, SPACE, "old/plan.md", "the old plan")
        await write(engram, SPACE, log_path(200), "an old log")
        await engram.storage.write(LOCAL_ADMIN, SPACE, "fresh.md", "recent")
        fresh = await engram.repository.get(SPACE.id, "fresh.md")
        old = await engram.repository.get(SPACE.id, "old/plan.md")
        assert fresh is not None and old is not None
        if fresh.updated_at == old.updated_at:
            await write(engram, SPACE, "fresh.md", "recent, again")
            fresh = await engram.repository.get(SPACE.id, "fresh.md")
            assert fresh is not None
        # 90 days after fresh.md was written: old/plan.md (written before it) is stale.
        now = fresh.updated_at + timedelta(days=90)
        job = StalenessReportJob(maintenance_deps(engram, clock=fixed(now)), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {"documents_checked": 2, "documents_stale": 1}
        assert len(report.details) == 1 and report.details[0].startswith(
            "old/plan.md (last updated"
        )
        shorter = await job.run(SPACE, SpaceSettings(stale_after_days=1))
        assert shorter.counts["documents_stale"] == 2
        await second_run_changes_nothing(engram, job, SpaceSettings())


async def test_duplicate_report_groups_identical_documents_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with engram_dev(tmp_path) as engram:
        await write(engram, SPACE, "a.md", "# Deploy\n\nRoll back with make rollback.\n")
        await write(engram, SPACE, "copies/a.md", "# Deploy\nRoll back   with make rollback.")
        await write(engram, SPACE, "c.md", "# deploy\n\nRoll back with make rollback.\n")
        await write(engram, SPACE, "empty1.md", "\n")
        await write(engram, SPACE, "empty2.md", "  ")
        await write(engram, SPACE, "x.md", "same elsewhere")
        await write(engram, OTHER, "x.md", "same elsewhere")
        job = DuplicateReportJob(maintenance_deps(engram), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 6,
            "duplicate_groups": 1,
            "duplicate_documents": 2,
            "near_duplicate_groups": 0,
            "near_duplicate_documents": 0,
        }
        assert report.details == ("a.md = copies/a.md",)
        await second_run_changes_nothing(engram, job, SpaceSettings())


RUNBOOK = (
    "# Deploy runbook\n\nBuild the release with make release, push the image to the "
    "registry, then roll it out with helm upgrade and watch the dashboards for ten minutes. "
    "If errors rise, roll back with make rollback and page the on-call engineer."
)


async def test_duplicate_report_suggests_merging_near_duplicates_and_merges_nothing(
    tmp_path: Path,
) -> None:
    """Seed 000's deduplication: documents nearly alike (an edited copy) are reported with a
    merge suggestion, the longest kept; unrelated notes, daily logs and short notes are not."""
    edited = RUNBOOK.replace("ten minutes", "fifteen minutes") + " Note the release in #ops."
    async with engram_dev(tmp_path) as engram:
        await write(engram, SPACE, "runbooks/deploy.md", RUNBOOK)
        await write(engram, SPACE, "notes/deploy-copy.md", edited)
        await write(engram, SPACE, "notes/lunch.md", "Lunch at the Thai place on Friday " * 3)
        await write(engram, SPACE, log_path(3), RUNBOOK)  # a dated record: not counted
        await write(engram, SPACE, "short-a.md", "Roll back with make rollback.")
        await write(engram, SPACE, "short-b.md", "Roll back with make rollback now.")
        job = DuplicateReportJob(maintenance_deps(engram), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts["near_duplicate_groups"] == 1
        assert report.counts["near_duplicate_documents"] == 2
        (line,) = [line for line in report.details if "~" in line]
        assert line.startswith("notes/deploy-copy.md ~ runbooks/deploy.md (similarity >= 0.")
        assert line.endswith(
            "suggest merging runbooks/deploy.md into notes/deploy-copy.md, then deleting it "
            "(not done: the operator's call)"
        )
        await second_run_changes_nothing(engram, job, SpaceSettings())
