"""The Edge engine's beam width follows the size of the space a search selects: a large
space is searched with `large_space_ef` (found as well, faster), a smaller one with
`hnsw_ef` (bench/RESULTS.md, "ef by the space's size")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engram.indexes.vector import edge_host
from engram.indexes.vector.edge_host import EdgeTuning, Where

MODEL = "ef-test"
DIMENSION = 8
TUNING = EdgeTuning(hnsw_ef=96, large_space_ef=24, large_space_points=200)


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[None]:
    edge_host.create(MODEL, str(tmp_path / "shard"), DIMENSION, TUNING)
    rng = np.random.default_rng(7)
    for space, count in (("big", 300), ("small", 40)):
        vectors = rng.normal(size=(count, DIMENSION)).astype(np.float32)
        ids = [str(uuid.uuid4()) for _ in range(count)]
        payloads = [{"space_id": space, "path": f"{space}/{i}.md"} for i in range(count)]
        edge_host.upsert(MODEL, ids, vectors, payloads)
    try:
        yield
    finally:
        edge_host.close(MODEL)


def ef_for(where: Where, tuning: EdgeTuning = TUNING) -> int:
    return edge_host.search_ef(edge_host._shard(MODEL), edge_host._filter(where), tuning)


@pytest.mark.usefixtures("shard")
def test_a_space_of_at_least_large_space_points_is_searched_with_large_space_ef() -> None:
    assert ef_for(Where(("big",))) == 24
    assert ef_for(Where(("small",))) == 96
    # Both spaces together are large; a path of the big space selects one point.
    assert ef_for(Where(("big", "small"))) == 24
    assert ef_for(Where(("big",), path="big/3.md")) == 96


@pytest.mark.usefixtures("shard")
def test_one_ef_for_every_space_when_both_are_the_same() -> None:
    fixed = EdgeTuning(hnsw_ef=48, large_space_ef=48, large_space_points=1)
    assert ef_for(Where(("big",)), fixed) == ef_for(Where(("small",)), fixed) == 48


@pytest.mark.usefixtures("shard")
def test_search_answers_from_each_space_only() -> None:
    query = np.ones(DIMENSION, dtype=np.float32)
    for space in ("big", "small"):
        rows = edge_host.search(MODEL, query, Where((space,)), 5, TUNING)
        assert len(rows) == 5
        assert {payload["space_id"] for _, payload in rows} == {space}
