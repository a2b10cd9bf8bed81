"""Dreaming's watermark store, on SQLite and on FerretDB: a watermark only moves forward from
the generation it was read at, so of two runs racing from one read exactly one records its
input, and a run that read an older watermark cannot overwrite a newer one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engram.backends.mongo import MongoDatabase, connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.dreaming import LogMark, Watermark
from engram.maintenance.dream_watermarks import (
    SCHEMA,
    MongoWatermarkStore,
    SqliteWatermarkStore,
    WatermarkMoved,
    WatermarkStore,
)
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract

AT = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
SPACE = "v1:project:acme:p::::agent"
OTHER = "v1:project:acme:q::::agent"


class Stores:
    def __init__(self, store: WatermarkStore, mongo: MongoDatabase | None) -> None:
        self.store = store
        self.mongo = mongo


@pytest.fixture(params=["sqlite", "mongo"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Stores]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "dream.db")
        await database.open([SCHEMA])
        yield Stores(SqliteWatermarkStore(database), None)
        await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    client, mongo = connect(real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}")
    store = MongoWatermarkStore(mongo)
    await store.ensure_indexes()
    await store.ensure_indexes()  # idempotent
    yield Stores(store, mongo)
    await client.drop_database(mongo.name)
    await client.close()


async def test_a_watermark_starts_empty_and_keeps_what_was_advanced(stores: Stores) -> None:
    store = stores.store
    assert await store.load(SPACE) == Watermark()
    marks = {
        "daily/2026-12-01.md": LogMark(120, "a" * 64),
        "daily/2026-12-01-cli.md": LogMark(7, "b" * 64),
    }
    first = await store.advance(SPACE, Watermark(), marks, AT)
    assert first == Watermark(generation=1, logs=marks)
    assert await store.load(SPACE) == first
    assert await store.load(OTHER) == Watermark(), "each space has its own"
    second = await store.advance(SPACE, first, {"daily/2026-12-02.md": LogMark(5, "c" * 64)}, AT)
    assert await store.load(SPACE) == second
    assert second.generation == 2 and list(second.logs) == ["daily/2026-12-02.md"]


async def test_a_run_that_read_an_older_watermark_cannot_record(stores: Stores) -> None:
    store = stores.store
    read = await store.load(SPACE)
    newer = await store.advance(SPACE, read, {"daily/a.md": LogMark(10, "a" * 64)}, AT)
    with pytest.raises(WatermarkMoved, match="advanced by another run"):
        await store.advance(SPACE, read, {"daily/a.md": LogMark(3, "z" * 64)}, AT)
    assert await store.load(SPACE) == newer, "the newer watermark is kept"


async def test_of_runs_racing_from_one_read_exactly_one_records(stores: Stores) -> None:
    store = stores.store
    read = await store.advance(SPACE, Watermark(), {"daily/a.md": LogMark(1, "a" * 64)}, AT)
    results = await asyncio.gather(
        *(
            store.advance(SPACE, read, {"daily/a.md": LogMark(10 + i, "a" * 64)}, AT)
            for i in range(8)
        ),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, Watermark)]
    assert len(won) == 1, results
    assert all(isinstance(r, WatermarkMoved) for r in results if not isinstance(r, Watermark))
    assert await store.load(SPACE) == won[0]


async def test_many_runs_leave_two_small_documents_per_space_on_mongo(stores: Stores) -> None:
    if stores.mongo is None:
        pytest.skip("SQLite keeps one row per space by construction")
    store = stores.store
    watermark = Watermark()
    for i in range(6):
        watermark = await store.advance(SPACE, watermark, {"daily/a.md": LogMark(i, "a" * 64)}, AT)
    stale = Watermark(generation=2)  # pruned long ago: its successor's insert would land
    with pytest.raises(WatermarkMoved):
        await store.advance(SPACE, stale, {}, AT)
    assert await store.load(SPACE) == watermark
    assert await stores.mongo["dream_watermarks"].count_documents({"space": SPACE}) == 2
