"""Index positions (read-your-writes): merging and validating a search's positions, which
recorded rows reach them, what the indexer records after applying a path, and waiting on
the embedded progress store (a record wakes the waiter; a spent budget returns what is
still behind)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from engram.backends.sqlite import SqliteDatabase
from engram.domain.errors import InvalidArgument
from engram.domain.positions import (
    FINISHED,
    MAX_POSITIONS,
    IndexLeg,
    IndexPosition,
    applied_versions,
    behind,
    deletion_version,
    merge_positions,
    progress_keys,
)
from engram.indexes.progress import SCHEMA, SqliteIndexProgress, wait_for_positions

SPACE = "v1:private:local::::notes"
OTHER = "v1:private:local::::other"


def at(path: str, document_id: str, version: int, space_id: str = SPACE) -> IndexPosition:
    return IndexPosition(space_id, path, document_id, version)


def test_merge_keeps_the_highest_version_per_document() -> None:
    merged = merge_positions(
        [at("a.md", "d1", 2), at("b.md", "d2", 1), at("a.md", "d1", 5), at("a.md", "d1", 3)],
        {SPACE},
    )
    assert merged == [at("a.md", "d1", 5), at("b.md", "d2", 1)]


def test_merge_keeps_two_documents_of_one_path_apart() -> None:
    # A path deleted and written again: two ids, versions not comparable.
    merged = merge_positions([at("a.md", "old", 7), at("a.md", "new", 1)], {SPACE})
    assert merged == [at("a.md", "old", 7), at("a.md", "new", 1)]


@pytest.mark.parametrize(
    ("position", "message"),
    [
        (IndexPosition("", "a.md", "d", 1), "space_id, path and document_id are required"),
        (IndexPosition(SPACE, "", "d", 1), "space_id, path and document_id are required"),
        (IndexPosition(SPACE, "a.md", "", 1), "space_id, path and document_id are required"),
        (IndexPosition(SPACE, "a.md", "d", 0), "version must be at least 1"),
        (IndexPosition(OTHER, "a.md", "d", 1), "names a space this search does not cover"),
    ],
)
def test_merge_refuses_bad_positions_by_index(position: IndexPosition, message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        merge_positions([at("ok.md", "d0", 1), position], {SPACE})
    assert "min_positions[1]" in refused.value.message
    assert message in refused.value.message


def test_merge_refuses_too_many_positions() -> None:
    many = [at(f"p{i}.md", f"d{i}", 1) for i in range(MAX_POSITIONS + 1)]
    with pytest.raises(InvalidArgument, match="at most 256"):
        merge_positions(many, {SPACE})
    assert len(merge_positions(many[:MAX_POSITIONS], {SPACE})) == MAX_POSITIONS


def test_behind_compares_each_document_with_its_row() -> None:
    positions = [at("a.md", "d1", 3), at("b.md", "d2", 1), at("c.md", "d3", 1)]
    reached = {(SPACE, "a.md", "d1"): 2, (SPACE, "b.md", "d2"): FINISHED}
    assert behind(positions, reached) == [at("a.md", "d1", 3), at("c.md", "d3", 1)]
    reached[(SPACE, "a.md", "d1")] = 3
    reached[(SPACE, "c.md", "d3")] = 9
    assert behind(positions, reached) == []


def test_applied_versions_finish_every_other_named_document() -> None:
    # The path now holds d2 at version 4; the events named d1 (deleted since) and d2.
    assert applied_versions(("d2", 4), ["d1", "d2", ""]) == {"d1": FINISHED, "d2": 4}
    # The path is deleted: every named document has ended.
    assert applied_versions(None, ["d1", "d2"]) == {"d1": FINISHED, "d2": FINISHED}
    # A reindex request names no document: only the current one is recorded.
    assert applied_versions(("d3", 1), []) == {"d3": 1}
    assert applied_versions(None, []) == {}


def test_a_delete_is_reached_only_once_the_leg_has_applied_the_delete() -> None:
    """d1 was written at versions 1 and 2, then deleted. A leg that has indexed version 2
    but not yet the delete still answers the document: the delete's position is behind
    there, and reached once the delete is applied."""
    deleted = at("a.md", "d1", deletion_version(2))
    indexed_v2 = {(SPACE, "a.md", "d1"): applied_versions(("d1", 2), ["d1"])["d1"]}
    assert behind([deleted], indexed_v2) == [deleted]
    indexed_delete = {(SPACE, "a.md", "d1"): applied_versions(None, ["d1"])["d1"]}
    assert behind([deleted], indexed_delete) == []


@pytest.fixture
async def progress(tmp_path: Path) -> SqliteIndexProgress:
    database = SqliteDatabase(tmp_path / "engram.db")
    await database.open([SCHEMA])
    return SqliteIndexProgress(database)


async def test_rows_only_move_up_per_leg(progress: SqliteIndexProgress) -> None:
    key = (SPACE, "a.md", "d1")
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 3})
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 2})  # a late duplicate
    assert await progress.reached(IndexLeg.KEYWORD, [key]) == {key: 3}
    assert await progress.reached(IndexLeg.VECTOR, [key]) == {key: 0}
    await progress.record(IndexLeg.VECTOR, SPACE, "a.md", {"d1": FINISHED})
    assert await progress.reached(IndexLeg.VECTOR, [key]) == {key: FINISHED}
    assert await progress.reached(IndexLeg.KEYWORD, [(SPACE, "b.md", "d9")]) == {}


async def test_forget_space_drops_only_that_space(progress: SqliteIndexProgress) -> None:
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 1})
    await progress.record(IndexLeg.KEYWORD, OTHER, "a.md", {"d1": 1})
    await progress.forget_space(SPACE)
    keys = [(SPACE, "a.md", "d1"), (OTHER, "a.md", "d1")]
    assert await progress.reached(IndexLeg.KEYWORD, keys) == {(OTHER, "a.md", "d1"): 1}


async def test_a_record_wakes_a_waiting_search(progress: SqliteIndexProgress) -> None:
    position = at("a.md", "d1", 2)
    waiter = asyncio.create_task(
        wait_for_positions(progress, IndexLeg.KEYWORD, [position], budget_seconds=30)
    )
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 1})
    await asyncio.sleep(0.05)
    assert not waiter.done()  # version 1 is not enough
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"d1": 2})
    assert await asyncio.wait_for(waiter, 10) == []


async def test_a_spent_budget_returns_what_is_still_behind(
    progress: SqliteIndexProgress,
) -> None:
    await progress.record(IndexLeg.VECTOR, SPACE, "a.md", {"d1": 1})
    positions = [at("a.md", "d1", 1), at("b.md", "d2", 1)]
    started = time.monotonic()
    pending = await wait_for_positions(progress, IndexLeg.VECTOR, positions, budget_seconds=0.2)
    assert pending == [at("b.md", "d2", 1)]
    assert time.monotonic() - started >= 0.2
    # A zero budget checks once and does not wait.
    assert await wait_for_positions(progress, IndexLeg.VECTOR, positions, 0) == pending
    assert await wait_for_positions(progress, IndexLeg.KEYWORD, [], 0) == []


def test_progress_keys_are_validated_and_asked_once() -> None:
    """GetIndexProgress's keys: repeats asked once, at most MAX_POSITIONS, every part named."""
    key = (SPACE, "a.md", "doc-1")
    assert progress_keys([key, (OTHER, "b.md", "doc-2"), key]) == [key, (OTHER, "b.md", "doc-2")]
    assert progress_keys([]) == []
    with pytest.raises(InvalidArgument, match=f"at most {MAX_POSITIONS} documents"):
        progress_keys([key] * (MAX_POSITIONS + 1))
    for broken in ((SPACE, "a.md", ""), (SPACE, "", "doc-1"), ("", "a.md", "doc-1")):
        with pytest.raises(InvalidArgument, match=r"documents\[1\]: space_id, path and"):
            progress_keys([key, broken])
