"""Embedding backfill on `engram dev`'s real services leaves alone what the indexer has
still queued: a bulk load written while the indexer is held back is indexed once, by its own
change events, not a second time by backfill - unless the indexer has been held back longer
than ENGRAM_BACKFILL_MAX_INDEXING_LAG_SECONDS, when backfill takes it as stopped and
re-queues."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.domain.chunks import Chunk
from engram.domain.maintenance import SpaceSettings
from engram.domain.spaces import parse_space_id
from engram.maintenance.hygiene import EmbeddingBackfillJob
from tests.support.maintenance import maintenance_deps, write
from tests.support.settings import server_settings

pytestmark = pytest.mark.contract

SPACE = parse_space_id("v1:private:local::::bulk")
INTERVAL = timedelta(hours=24)
# One short text for every document: the embedding cache embeds it once, so the bulk load
# costs index writes, not model time.
TEXT = "A short note about the deploy."


@contextlib.asynccontextmanager
async def engram_dev(tmp_path: Path, **settings: Any) -> AsyncIterator[EmbeddedEngram]:
    async with embedded_engram(server_settings(tmp_path / "engram", **settings)) as engram:
        yield engram


def count_keyword_writes(engram: EmbeddedEngram) -> dict[str, int]:
    """Counts the indexer's keyword index writes per path (the real index's own method,
    counted on the way through)."""
    keyword = engram.indexing.keyword
    writes: dict[str, int] = {}
    replace_chunks = keyword.replace_chunks

    async def counted(space_id: str, path: str, chunks: Sequence[Chunk]) -> None:
        writes[path] = writes.get(path, 0) + 1
        await replace_chunks(space_id, path, chunks)

    keyword.replace_chunks = counted  # type: ignore[method-assign]
    return writes


async def bulk_load_with_indexer_held(engram: EmbeddedEngram, count: int) -> list[str]:
    # The relay feeds the indexer: stopped, every change event stays queued in the outbox.
    await engram.relay.stop(drain_seconds=0)
    paths = [f"bulk/{i:05d}.md" for i in range(count)]
    for path in paths:
        await write(engram, SPACE, path, TEXT)
    return paths


async def test_backfill_leaves_a_queued_bulk_load_to_its_own_events(tmp_path: Path) -> None:
    async with engram_dev(tmp_path) as engram:
        writes = count_keyword_writes(engram)
        paths = await bulk_load_with_indexer_held(engram, 2000)
        job = EmbeddingBackfillJob(maintenance_deps(engram), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 2000,
            "documents_requeued": 0,
            "documents_pending": 2000,
        }
        assert "2000 still queued for the indexer" in report.message
        engram.relay.start()
        assert await engram.relay.drained(300)
        assert writes == dict.fromkeys(paths, 1)
        again = await job.run(SPACE, SpaceSettings())
        assert again.counts == {
            "documents_checked": 2000,
            "documents_requeued": 0,
            "documents_pending": 0,
        }


async def test_backfill_requeues_when_the_indexer_is_held_too_long(tmp_path: Path) -> None:
    async with engram_dev(tmp_path, backfill_max_indexing_lag_seconds=0.5) as engram:
        writes = count_keyword_writes(engram)
        paths = await bulk_load_with_indexer_held(engram, 200)
        await asyncio.sleep(1.0)
        job = EmbeddingBackfillJob(maintenance_deps(engram), INTERVAL)

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 200,
            "documents_requeued": 200,
            "documents_pending": 0,
        }
        assert "stopped or stuck" in report.details[0]
        engram.relay.start()
        assert await engram.relay.drained(300)
        # Each document indexed; the write and the re-queue may be coalesced in one batch.
        assert set(writes) == set(paths)
        assert all(1 <= n <= 2 for n in writes.values())
        again = await job.run(SPACE, SpaceSettings())
        assert again.counts["documents_requeued"] == 0


class QueueYetToHear:
    """The reindex queue as JetStream shows it while storage's outbox still holds the change
    events (the relay has not handed them over): nothing pending."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    async def oldest_pending(self) -> None:
        return None

    async def enqueue(self, documents: Sequence[Any]) -> None:
        await self._queue.enqueue(documents)


async def test_backfill_leaves_writes_whose_events_have_not_reached_the_queue(
    tmp_path: Path,
) -> None:
    async with engram_dev(tmp_path) as engram:
        writes = count_keyword_writes(engram)
        paths = await bulk_load_with_indexer_held(engram, 50)
        deps = maintenance_deps(engram)
        unheard = replace(deps, reindex=QueueYetToHear(deps.reindex))

        report = await EmbeddingBackfillJob(unheard, INTERVAL).run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 50,
            "documents_requeued": 0,
            "documents_pending": 50,
        }
        # Past the 30 s an event takes at most to reach the queue, they are missing.
        later = replace(unheard, clock=lambda: datetime.now(UTC) + timedelta(seconds=31))
        report = await EmbeddingBackfillJob(later, INTERVAL).run(SPACE, SpaceSettings())
        assert report.counts["documents_requeued"] == 50
        engram.relay.start()
        assert await engram.relay.drained(300)
        assert set(writes) == set(paths)
