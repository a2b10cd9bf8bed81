"""The embedded indexer's backlog counts down per document: the relay marks a batch of up to
256 events published only once the whole batch is indexed, so a backlog read from the outbox
alone moved in steps of 256. The handler reports each document as it is indexed, and the
backlog leaves those events out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from engram.backends.sqlite import SqliteDatabase
from engram.domain.spaces import parse_space_id
from engram.indexer.outbox_feed import OutboxIndexHandler
from engram.indexer.service import reindex_events
from engram.storage.sqlite_outbox import SqliteOutbox
from engram.storage.sqlite_repository import SCHEMA, SqliteDocumentRepository

pytestmark = pytest.mark.unit

SPACE = parse_space_id("v1:private:local::::notes")


class SteppedWorker:
    """Indexes one document each time the test releases it (the real worker's contract:
    `indexed` is told each document as soon as it is done)."""

    def __init__(self) -> None:
        self.release = asyncio.Semaphore(0)
        self.done = asyncio.Queue[tuple[str, str]]()

    async def index_many(
        self,
        keys: Iterable[tuple[Any, str]],
        *,
        traces: Mapping[Any, Sequence[Mapping[str, str]]] | None = None,
        named: Mapping[Any, Any] | None = None,
        indexed: Callable[[tuple[str, str]], None] | None = None,
    ) -> dict[tuple[str, str], Exception | None]:
        results: dict[tuple[str, str], Exception | None] = {}
        for space, path in keys:
            await self.release.acquire()
            key = (space.id, path)
            results[key] = None
            if indexed is not None:
                indexed(key)
            await self.done.put(key)
        return results


async def test_backlog_counts_down_per_document_within_a_batch(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path / "engram.db")
    await database.open([SCHEMA])
    try:
        repository = SqliteDocumentRepository(database, retention=5)
        # Two events for d0.md (one indexing run answers both), one for each other document.
        paths = ["d0.md", "d0.md", "d1.md", "d2.md", "d3.md"]
        await repository.record_events(reindex_events([(SPACE, path) for path in paths]))
        outbox = SqliteOutbox(database)
        batch = await outbox.pending(256)
        assert len(batch) == 5
        worker = SteppedWorker()
        handler = OutboxIndexHandler(worker, max_attempts=3)  # type: ignore[arg-type]

        async def backlog() -> int:
            return await outbox.backlog(excluding=handler.indexed_in_flight())

        running = asyncio.create_task(handler(batch))
        assert await backlog() == 5
        seen = []
        for _ in range(4):
            worker.release.release()
            await asyncio.wait_for(worker.done.get(), 10)
            seen.append((await backlog(), handler.indexed_total))
        await asyncio.wait_for(running, 10)
        assert seen == [(3, 2), (2, 3), (1, 4), (0, 5)]
        # The relay then marks the batch published: still 0, and the next batch starts clean.
        await outbox.clear(batch)
        assert await backlog() == 0
        await repository.record_events(reindex_events([(SPACE, "d4.md")]))
        assert await backlog() == 1
    finally:
        await database.close()
