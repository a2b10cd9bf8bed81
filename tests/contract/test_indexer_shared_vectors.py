"""NumpyVectorIndex shared by several indexer processes on one host: every replace and
delete lands in the SQLite file whatever the writing process holds in memory, so a reader
that reopens the directory sees the last write of each path. (Each instance here has its own
connections and memory, as a separate process would.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram.domain.chunks import Chunk, ModelInfo, chunk_id
from engram.indexes.ports import Vectors
from engram.indexes.vector.numpy_index import NumpyVectorIndex

pytestmark = pytest.mark.contract

MODEL = ModelInfo("shared-model", 4)


def chunks(path: str, count: int, version: int) -> tuple[list[Chunk], Vectors]:
    made = [
        Chunk(chunk_id("doc", i), "doc", "s", "t", path, i, version, f"{path} {i} v{version}")
        for i in range(count)
    ]
    rng = np.random.default_rng(version)
    vectors = rng.standard_normal((count, MODEL.dimension)).astype(np.float32)
    return made, vectors


async def opened(root: Path) -> NumpyVectorIndex:
    index = NumpyVectorIndex(root)
    await index.open()
    await index.ensure_collection(MODEL)
    if await index.active_model() is None:
        await index.activate(MODEL.model_id)
    return index


async def test_the_last_write_of_any_process_is_what_a_reopened_reader_sees(
    tmp_path: Path,
) -> None:
    first = await opened(tmp_path)
    second = await opened(tmp_path)
    try:
        await first.replace_chunks(MODEL.model_id, "s", "a.md", *chunks("a.md", 3, 1))
        # The second process never saw a.md's rows, yet its delete removes them.
        await second.delete_chunks("s", "a.md")
        await first.replace_chunks(MODEL.model_id, "s", "b.md", *chunks("b.md", 4, 1))
        # A replace with fewer chunks by the other process leaves exactly its chunks.
        smaller, vectors = chunks("b.md", 2, 2)
        await second.replace_chunks(MODEL.model_id, "s", "b.md", smaller, vectors)
        reader = await opened(tmp_path)
        try:
            assert await reader.chunks_of("s", "a.md") == []
            assert await reader.chunks_of("s", "b.md") == smaller
            hit = (await reader.search(["s"], vectors[1], limit=1))[0]
            assert hit.chunk == smaller[1] and hit.score == pytest.approx(1.0, abs=1e-5)
        finally:
            await reader.close()
    finally:
        await first.close()
        await second.close()
