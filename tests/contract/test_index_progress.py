"""IndexProgress adapters (read-your-writes): the embedded SQLite store and the MongoDB one on
a real wire-protocol server (FerretDB from deploy/local, or ENGRAM_TEST_MONGO_URI). Both
keep one row per (space, path, document id) and leg, only ever moving up."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.positions import FINISHED, IndexLeg, IndexPosition
from engram.indexes.progress import (
    SCHEMA,
    IndexProgress,
    MongoIndexProgress,
    SqliteIndexProgress,
    wait_for_positions,
)
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract

SPACE = "v1:project:acme:p1:::notes"
OTHER = "v1:project:acme:p1:::archive"


@pytest.fixture(params=["sqlite", "mongo"])
async def progress(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[IndexProgress]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "engram.db")
        await database.open([SCHEMA])
        try:
            yield SqliteIndexProgress(database)
        finally:
            await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    backends: RealBackends = request.getfixturevalue("real_backends")
    name = f"engram_progress_{uuid.uuid4().hex[:12]}"
    client, database = connect(backends.url("mongo"), name)
    store = MongoIndexProgress(database)
    await store.ensure_indexes()
    try:
        yield store
    finally:
        await client.drop_database(name)
        await client.close()


async def test_rows_move_up_only_per_leg_and_document(progress: IndexProgress) -> None:
    a1 = (SPACE, "a.md", "d1")
    a2 = (SPACE, "a.md", "d2")
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 4})
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 2})
    await progress.record(IndexLeg.VECTOR, SPACE, "a.md", {"d1": 3})
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": FINISHED, "d2": 1})

    assert await progress.reached(IndexLeg.KEYWORD, [a1, a2, a1]) == {a1: FINISHED, a2: 1}
    vector = await progress.reached(IndexLeg.VECTOR, [a1, a2])
    assert vector[a1] == 3
    assert vector.get(a2, 0) == 0
    assert await progress.reached(IndexLeg.KEYWORD, [(SPACE, "b.md", "d1")]) == {}


async def test_concurrent_records_of_one_row_end_at_a_recorded_value(
    progress: IndexProgress,
) -> None:
    """Several replicas recording one row at once: the row exists afterwards and holds one
    of the recorded values (on MongoDB the highest; FerretDB v1's non-atomic updates may
    keep a lower one, which only makes a search wait longer)."""
    key = (SPACE, "race.md", "d1")
    await asyncio.gather(
        *(progress.record(IndexLeg.KEYWORD, SPACE, "race.md", {"d1": v}) for v in range(1, 9))
    )
    assert (await progress.reached(IndexLeg.KEYWORD, [key]))[key] in range(1, 9)
    await progress.record(IndexLeg.KEYWORD, SPACE, "race.md", {"d1": 20})
    assert (await progress.reached(IndexLeg.KEYWORD, [key]))[key] == 20


async def test_forget_space_drops_that_space_only(progress: IndexProgress) -> None:
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 1})
    await progress.record(IndexLeg.KEYWORD, OTHER, "a.md", {"d1": 1})
    await progress.forget_space(SPACE)
    keys = [(SPACE, "a.md", "d1"), (OTHER, "a.md", "d1")]
    assert await progress.reached(IndexLeg.KEYWORD, keys) == {(OTHER, "a.md", "d1"): 1}


async def test_a_waiter_sees_a_record_made_while_it_waits(progress: IndexProgress) -> None:
    position = IndexPosition(SPACE, "w.md", "d1", 1)
    waiter: asyncio.Task[Any] = asyncio.create_task(
        wait_for_positions(progress, IndexLeg.VECTOR, [position], budget_seconds=30)
    )
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await progress.record(IndexLeg.VECTOR, SPACE, "w.md", {"d1": 1})
    assert await asyncio.wait_for(waiter, 10) == []
