"""EdgeVectorIndex runs Qdrant Edge in a child process: what the serving process gains by it
(its event loop runs while the engine works: qdrant-edge-py holds the GIL for a whole call)
and what a dead engine process costs (the call it was running, nothing acknowledged).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from engram.domain.chunks import ModelInfo
from engram.indexes.ports import IndexUnavailable
from engram.indexes.vector.edge_index import EdgeTuning, EdgeVectorIndex
from engram.indexes.vector.points import payload, point_id
from tests.contract.test_vector_index import make_chunks, put, unit_vectors

pytestmark = pytest.mark.contract

MODEL = ModelInfo("test-model", 8)
WIDE = ModelInfo("wide-model", 384)
# Every segment indexed, and the optimizer only when the test asks.
EAGER = EdgeTuning(full_scan_threshold_kb=1, indexing_threshold_kb=1, optimize_delay_seconds=1e9)
# ~2 s of HNSW building on this 2-core machine (bench/RESULTS.md, "the engine's process").
BUILD_POINTS = 3000


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[EdgeVectorIndex]:
    opened = EdgeVectorIndex(tmp_path / "v", tuning=EAGER)
    await opened.open()
    await opened.ensure_collection(MODEL)
    await opened.activate(MODEL.model_id)
    yield opened
    await opened.close()


async def load_unbuilt(index: EdgeVectorIndex, count: int) -> None:
    """`count` points of 384 dimensions over four spaces, not yet indexed."""
    await index.ensure_collection(WIDE)
    chunks = [c for n in range(count // 10) for c in make_chunks(f"s{n % 4}", f"d{n}.md", 10)]
    vectors = np.random.default_rng(7).standard_normal((len(chunks), 384)).astype(np.float32)
    await index.import_points(
        WIDE.model_id,
        [point_id(c.chunk_id) for c in chunks],
        vectors,
        [payload(c, [""]) for c in chunks],
    )


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def killed(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        if gone(pid):  # reaped: the index's pool has seen it die
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"engine process {pid} still there 5 s after SIGKILL")


async def test_the_event_loop_keeps_running_while_the_engine_optimizes(
    index: EdgeVectorIndex,
) -> None:
    await load_unbuilt(index, BUILD_POINTS)
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await index.optimize()
    took = time.perf_counter() - started
    done.set()
    await ticker
    # In process the engine held the GIL for the whole build: one gap as long as the build.
    assert len(gaps) >= 20, f"{len(gaps)} ticks during a {took:.2f} s optimize"
    assert max(gaps) < took / 4, f"the loop stalled {max(gaps):.2f} s of a {took:.2f} s build"


async def test_an_engine_killed_mid_call_fails_that_call_then_restarts_from_disk(
    index: EdgeVectorIndex,
) -> None:
    stored = [await put(index, f"s{n % 2}", f"d{n}.md", 3, seed=700 + n) for n in range(6)]
    await load_unbuilt(index, BUILD_POINTS)
    first = await index.engine_pid()
    building = asyncio.create_task(index.optimize())
    await asyncio.sleep(0.1)  # the build has started; it runs ~2 s
    await killed(first)
    with pytest.raises(IndexUnavailable, match="process died"):
        await building
    # The next call starts a new engine, which reopens both shards from disk.
    chunks, vectors = stored[4]
    hits = await index.search(["s0"], vectors[2], limit=1)
    assert hits[0].chunk == chunks[2]
    assert await index.engine_pid() != first
    for n, (chunks, _) in enumerate(stored):
        assert await index.chunks_of(f"s{n % 2}", f"d{n}.md") == chunks
    assert len(await index.indexed_documents("s1", model_id=WIDE.model_id)) == BUILD_POINTS // 40
    await index.optimize()  # the interrupted build runs again, to the end


async def test_an_engine_killed_while_idle_is_replaced_by_the_next_call(
    index: EdgeVectorIndex,
) -> None:
    chunks, vectors = await put(index, "s1", "a.md", 4, seed=800)
    first = await index.engine_pid()
    await killed(first)
    # That call never reached the dead process, so it runs on the new one.
    hits = await index.search(["s1"], vectors[1], limit=1)
    assert hits[0].chunk == chunks[1]
    again, _ = await put(index, "s1", "b.md", 2, seed=801)
    assert await index.chunks_of("s1", "b.md") == again
    assert await index.engine_pid() != first


async def test_close_stops_the_engine_process(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path / "v", tuning=EAGER)
    await index.open()
    pid = await index.engine_pid()
    await index.close()
    assert gone(pid)
    with pytest.raises(IndexUnavailable, match="not open"):
        await index.search(["s1"], unit_vectors(1, 1)[0], limit=1)
    # Reopened, it starts another.
    await index.open()
    try:
        assert await index.engine_pid() != pid
    finally:
        await index.close()


OWNER = """
import asyncio, sys
from pathlib import Path
from engram.domain.chunks import ModelInfo
from engram.indexes.vector.edge_index import EdgeVectorIndex

async def main() -> None:
    index = EdgeVectorIndex(Path(sys.argv[1]))
    await index.open()
    await index.ensure_collection(ModelInfo("test-model", 8))
    print(await index.engine_pid(), flush=True)
    await asyncio.sleep(120)

if __name__ == "__main__":
    asyncio.run(main())
"""


async def test_the_engine_dies_with_a_killed_server_and_frees_the_shard(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(tmp_path / "v"), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert owner.stdout is not None
        engine = int(await asyncio.wait_for(owner.stdout.readline(), 60))
    finally:
        owner.kill()
        await owner.wait()
    for _ in range(500):
        if gone(engine):
            break
        await asyncio.sleep(0.01)
    # Still running, it would hold the shard's lock: the restarted server could not open it.
    index = EdgeVectorIndex(tmp_path / "v", tuning=EAGER)
    await index.open()
    try:
        assert await index.collections() == [MODEL]
    finally:
        await index.close()


OPEN_AND_SEARCH = """
import asyncio, sys
from pathlib import Path
from engram.domain.chunks import ModelInfo
from engram.indexes.vector.edge_index import EdgeVectorIndex

async def main() -> None:
    index = EdgeVectorIndex(Path(sys.argv[1]))
    await index.open()
    await index.ensure_collection(ModelInfo("m", 4))
    await index.activate("m")
    print("engine", await index.engine_pid() > 0)
    await index.close()

asyncio.run(main())
"""


def test_the_engine_starts_under_a_tmpdir_too_long_for_a_unix_socket(tmp_path: Path) -> None:
    """The fork server listens on a socket under $TMPDIR; a long $TMPDIR (a container's or
    a test's scratch directory) made `engram dev` exit with "AF_UNIX path too long". The
    engine then starts as a spawned process instead."""
    deep = tmp_path / ("t" * 60) / ("u" * 60)
    deep.mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-c", OPEN_AND_SEARCH, str(tmp_path / "v")],
        env={**os.environ, "TMPDIR": str(deep)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "engine True" in result.stdout
