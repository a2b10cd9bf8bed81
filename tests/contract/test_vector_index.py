"""The VectorIndex contract, run against every adapter.

NumpyVectorIndex is the embedded index itself; QdrantVectorIndex runs on Qdrant local mode
(`AsyncQdrantClient(path=...)`, the same client API as the server; no server binary can be
had here), which scans in Python, so the data stays small.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, chunk_id
from engram.domain.errors import InvalidArgument
from engram.indexes.ports import IndexModelMismatch, IndexUnavailable, VectorIndex, Vectors
from engram.indexes.vector import numpy_index
from engram.indexes.vector.edge_index import EdgeTuning, EdgeVectorIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.indexes.vector.qdrant_index import QdrantVectorIndex, point_id

pytestmark = [
    pytest.mark.contract,
    # Local mode ignores payload indexes and says so; the server needs them.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

DIM = 8
MODEL = ModelInfo("test-model", DIM)
OTHER = ModelInfo("other:model/v2", 4)

IndexFactory = Callable[[], VectorIndex]
# Edge with an HNSW index built after a few points and optimized at once, so the suite's
# small data goes through the graph and the quantized vectors, not only the plain scan.
SMALL = EdgeTuning(full_scan_threshold_kb=1, indexing_threshold_kb=1, optimize_delay_seconds=0.0)


ADAPTERS = ["edge", "numpy", "qdrant-local", "qdrant-server"]


@pytest.fixture(params=ADAPTERS)
def index_factory(request: pytest.FixtureRequest, tmp_path: Path) -> IndexFactory:
    """Builds an unopened index over the same on-disk state each time it is called."""
    server = os.environ.get("ENGRAM_TEST_QDRANT_URL")
    if request.param == "qdrant-server" and not server:
        pytest.skip("no Qdrant server here: set ENGRAM_TEST_QDRANT_URL to run on one")
    # A server is shared: each test gets collections and an alias of its own.
    unique = f"engram-test-{uuid.uuid4().hex[:12]}"

    def make() -> VectorIndex:
        if request.param == "edge":
            return EdgeVectorIndex(tmp_path / "vectors", tuning=SMALL)
        if request.param == "numpy":
            return NumpyVectorIndex(tmp_path / "vectors")
        if request.param == "qdrant-server":
            assert server is not None
            return QdrantVectorIndex(
                AsyncQdrantClient(url=server, check_compatibility=False),
                alias=unique,
                collection_prefix=f"{unique}-",
            )
        return QdrantVectorIndex(AsyncQdrantClient(path=str(tmp_path / "qdrant")))

    return make


@pytest.fixture
async def index(index_factory: IndexFactory) -> AsyncIterator[VectorIndex]:
    opened = index_factory()
    await opened.open()
    await opened.ensure_collection(MODEL)
    await opened.activate(MODEL.model_id)
    yield opened
    await opened.close()


def unit_vectors(count: int, seed: int, dim: int = DIM) -> Vectors:
    matrix = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    result: Vectors = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return result


def make_chunks(
    space_id: str, path: str, count: int, *, document_id: str = "", version: int = 1
) -> list[Chunk]:
    document_id = document_id or f"doc-{space_id}-{path}"
    return [
        Chunk(
            chunk_id=chunk_id(document_id, i),
            document_id=document_id,
            space_id=space_id,
            tenant="acme",
            path=path,
            chunk_index=i,
            doc_version=version,
            content=f"{path} part {i}",
        )
        for i in range(count)
    ]


async def put(
    index: VectorIndex,
    space_id: str,
    path: str,
    count: int,
    seed: int,
    *,
    model: ModelInfo = MODEL,
    document_id: str = "",
) -> tuple[list[Chunk], Vectors]:
    chunks = make_chunks(space_id, path, count, document_id=document_id)
    vectors = unit_vectors(count, seed, model.dimension)
    await index.replace_chunks(model.model_id, space_id, path, chunks, vectors)
    return chunks, vectors


async def test_replace_then_search_finds_the_chunk(index: VectorIndex) -> None:
    chunks, vectors = await put(index, "s1", "notes/a.md", 3, seed=1)
    hits = await index.search(["s1"], vectors[1], limit=3)
    assert hits[0].chunk == chunks[1]
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.chunk.chunk_id for h in hits} == {c.chunk_id for c in chunks}


async def test_search_limit_caps_results(index: VectorIndex) -> None:
    await put(index, "s1", "a.md", 10, seed=2)
    assert len(await index.search(["s1"], unit_vectors(1, 3)[0], limit=4)) == 4
    assert await index.search(["s1"], unit_vectors(1, 3)[0], limit=0) == []
    assert await index.search([], unit_vectors(1, 3)[0], limit=4) == []


async def test_replace_with_fewer_chunks_removes_the_extras(index: VectorIndex) -> None:
    _, old_vectors = await put(index, "s1", "a.md", 5, seed=4)
    chunks, _ = await put(index, "s1", "a.md", 2, seed=5)
    assert await index.chunks_of("s1", "a.md") == chunks
    hits = await index.search(["s1"], old_vectors[4], limit=10)
    assert sorted(h.chunk.chunk_index for h in hits) == [0, 1]


async def test_replace_by_a_new_document_at_the_same_path_drops_the_old_one(
    index: VectorIndex,
) -> None:
    await put(index, "s1", "a.md", 3, seed=6, document_id="first")
    chunks, _ = await put(index, "s1", "a.md", 3, seed=7, document_id="second")
    assert await index.chunks_of("s1", "a.md") == chunks
    hits = await index.search(["s1"], unit_vectors(1, 8)[0], limit=10)
    assert {h.chunk.document_id for h in hits} == {"second"}


async def test_replace_with_no_chunks_empties_the_path(index: VectorIndex) -> None:
    await put(index, "s1", "a.md", 3, seed=9)
    await index.replace_chunks(MODEL.model_id, "s1", "a.md", [], np.empty((0, DIM), np.float32))
    assert await index.chunks_of("s1", "a.md") == []


async def test_delete_removes_the_path_only(index: VectorIndex) -> None:
    await put(index, "s1", "a.md", 3, seed=10)
    kept, kept_vectors = await put(index, "s1", "b.md", 2, seed=11)
    await index.delete_chunks("s1", "a.md")
    assert await index.chunks_of("s1", "a.md") == []
    hits = await index.search(["s1"], kept_vectors[0], limit=10)
    assert [h.chunk.path for h in hits] == ["b.md", "b.md"]
    assert await index.chunks_of("s1", "b.md") == kept
    # Deleting what is not there is fine.
    await index.delete_chunks("s1", "a.md")
    await index.delete_chunks("nowhere", "a.md")


async def test_delete_removes_the_path_from_every_collection(index: VectorIndex) -> None:
    await index.ensure_collection(OTHER)
    await put(index, "s1", "a.md", 2, seed=12)
    await put(index, "s1", "a.md", 2, seed=13, model=OTHER)
    await index.delete_chunks("s1", "a.md")
    assert await index.chunks_of("s1", "a.md", model_id=MODEL.model_id) == []
    assert await index.chunks_of("s1", "a.md", model_id=OTHER.model_id) == []


async def test_space_filter_never_returns_another_spaces_chunk(index: VectorIndex) -> None:
    spaces = [f"space-{n}" for n in range(12)]
    planted: dict[str, Vectors] = {}
    for n, space in enumerate(spaces):
        _, vectors = await put(index, space, f"doc{n}.md", 4, seed=100 + n)
        planted[space] = vectors
    for target in spaces:
        others = [s for s in spaces if s != target]
        # The query is exactly a chunk of `target`, which is never asked for.
        hits = await index.search(others[:3], planted[target][0], limit=20)
        assert hits, "the requested spaces hold chunks"
        assert {h.chunk.space_id for h in hits} <= set(others[:3])
        hits = await index.search(["no-such-space"], planted[target][0], limit=20)
        assert hits == []


async def test_multi_space_search_merges_by_score(index: VectorIndex) -> None:
    _, a = await put(index, "sa", "x.md", 6, seed=20)
    await put(index, "sb", "y.md", 6, seed=21)
    await put(index, "sc", "z.md", 6, seed=22)
    hits = await index.search(["sa", "sb", "sc"], a[2], limit=7)
    assert len(hits) == 7
    assert hits[0].chunk.space_id == "sa" and hits[0].chunk.chunk_index == 2
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert {h.chunk.space_id for h in hits} <= {"sa", "sb", "sc"}
    # The global top 7 out of the three spaces, checked against brute force.
    everything = [await index.search([s], a[2], limit=6) for s in ("sa", "sb", "sc")]
    best = sorted((h.score for hs in everything for h in hs), reverse=True)[:7]
    assert scores == pytest.approx(best, abs=1e-5)


async def test_path_prefix_selects_a_directory_or_a_document_before_ranking(
    index: VectorIndex,
) -> None:
    # The keyword indexes' rule (engram.indexes.keyword.scoping): whole path segments only.
    _, top = await put(index, "s1", "MEMORY.md", 2, seed=30)
    await put(index, "s1", "daily/2026-11-01.md", 2, seed=31)
    await put(index, "s1", "daily/2026-12-01.md", 2, seed=32)
    await put(index, "s1", "dailyX.md", 2, seed=35)
    await put(index, "s1", "projects/x/notes.md", 2, seed=33)
    await put(index, "other", "daily/2026-11-02.md", 2, seed=34)
    daily = {"daily/2026-11-01.md", "daily/2026-12-01.md"}
    everything = daily | {"MEMORY.md", "dailyX.md", "projects/x/notes.md"}
    for prefix, paths in [
        ("daily", daily),
        ("daily/", daily),
        ("/daily/", daily),
        ("projects", {"projects/x/notes.md"}),
        ("projects/x/", {"projects/x/notes.md"}),
        ("daily/2026-11-01.md", {"daily/2026-11-01.md"}),
        ("MEMORY.md", {"MEMORY.md"}),
        ("/", everything),
        ("daily/2026-11", set()),
        ("proj", set()),
        ("MEMORY", set()),
        ("nothing/", set()),
    ]:
        # Even a query that matches MEMORY.md best only returns chunks in the scope.
        hits = await index.search(["s1"], top[0], limit=1, path_prefix=prefix)
        assert {h.chunk.path for h in hits} <= paths, prefix
        assert len(hits) == (1 if paths else 0), prefix
        wide = await index.search(["s1"], top[0], limit=20, path_prefix=prefix)
        assert {h.chunk.path for h in wide} == paths, prefix


async def test_other_models_and_dimensions_are_refused(index: VectorIndex) -> None:
    with pytest.raises(IndexModelMismatch):
        await index.ensure_collection(ModelInfo(MODEL.model_id, DIM + 1))
    chunks = make_chunks("s1", "a.md", 2)
    with pytest.raises(IndexModelMismatch):
        await index.replace_chunks(MODEL.model_id, "s1", "a.md", chunks, unit_vectors(2, 1, 4))
    with pytest.raises(IndexModelMismatch):
        await index.replace_chunks("never-created", "s1", "a.md", chunks, unit_vectors(2, 1))
    with pytest.raises(IndexModelMismatch):
        await index.search(["s1"], unit_vectors(1, 1, DIM + 2)[0], limit=3)
    with pytest.raises(IndexModelMismatch):
        await index.activate("never-created")
    assert await index.chunks_of("s1", "a.md") == []
    # Idempotent for the same model.
    await index.ensure_collection(MODEL)
    assert await index.collections() == [MODEL]


async def test_inconsistent_chunks_are_refused(index: VectorIndex) -> None:
    chunks = make_chunks("s1", "a.md", 2)
    with pytest.raises(InvalidArgument):
        await index.replace_chunks(MODEL.model_id, "s1", "a.md", chunks, unit_vectors(3, 1))
    with pytest.raises(InvalidArgument):
        await index.replace_chunks(MODEL.model_id, "s2", "a.md", chunks, unit_vectors(2, 1))


async def test_activate_switches_what_search_uses(index_factory: IndexFactory) -> None:
    index = index_factory()
    await index.open()
    try:
        assert await index.active_model() is None
        assert await index.search(["s1"], unit_vectors(1, 1)[0], limit=5) == []
        await index.ensure_collection(MODEL)
        await index.ensure_collection(OTHER)
        assert await index.collections() == sorted([MODEL, OTHER], key=lambda m: m.model_id)
        first, v8 = await put(index, "s1", "a.md", 2, seed=40)
        second, v4 = await put(index, "s1", "a.md", 3, seed=41, model=OTHER)

        await index.activate(MODEL.model_id)
        assert await index.active_model() == MODEL
        assert (await index.search(["s1"], v8[0], limit=5))[0].chunk == first[0]
        assert await index.chunks_of("s1", "a.md") == first
        with pytest.raises(IndexModelMismatch):
            await index.search(["s1"], v4[0], limit=5)

        await index.activate(OTHER.model_id)
        assert await index.active_model() == OTHER
        assert (await index.search(["s1"], v4[1], limit=5))[0].chunk == second[1]
        assert await index.chunks_of("s1", "a.md") == second
        # An explicit model id reads the other collection.
        hits = await index.search(["s1"], v8[1], limit=5, model_id=MODEL.model_id)
        assert hits[0].chunk == first[1]
        assert await index.chunks_of("s1", "a.md", model_id=MODEL.model_id) == first

        await index.drop_collection(OTHER.model_id)
        assert await index.active_model() is None
        assert await index.collections() == [MODEL]
        await index.drop_collection(OTHER.model_id)
    finally:
        await index.close()


async def test_searches_running_when_their_collection_is_dropped_still_answer(
    index_factory: IndexFactory,
) -> None:
    # A model switch drops the old collection while searches that chose it may still run
    # (queued for a worker thread, or inside the engine): they answer from it, and only a
    # search that starts after the drop is told the model is gone.
    index = index_factory()
    await index.open()
    try:
        await index.ensure_collection(OTHER)
        chunks, vectors = await put(index, "s1", "a.md", 3, seed=42, model=OTHER)
        running = [
            asyncio.create_task(
                index.search(["s1"], vectors[i % 3], limit=3, model_id=OTHER.model_id)
            )
            for i in range(64)
        ]
        await asyncio.sleep(0)  # every search has started and picked its collection
        await index.drop_collection(OTHER.model_id)
        for i, hits in enumerate(await asyncio.gather(*running)):
            assert hits[0].chunk == chunks[i % 3]
        with pytest.raises(IndexModelMismatch):
            await index.search(["s1"], vectors[0], limit=3, model_id=OTHER.model_id)
    finally:
        await index.close()


async def test_state_survives_close_and_reopen(index_factory: IndexFactory) -> None:
    index = index_factory()
    await index.open()
    await index.ensure_collection(MODEL)
    await index.ensure_collection(OTHER)
    await index.activate(OTHER.model_id)
    chunks, vectors = await put(index, "s1", "notes/a.md", 3, seed=50)
    await put(index, "s1", "notes/b.md", 2, seed=51)
    await index.delete_chunks("s1", "notes/b.md")
    other_chunks, _ = await put(index, "s2", "x.md", 1, seed=52, model=OTHER)
    await index.close()

    reopened = index_factory()
    await reopened.open()
    try:
        assert await reopened.active_model() == OTHER
        assert await reopened.collections() == sorted([MODEL, OTHER], key=lambda m: m.model_id)
        assert await reopened.chunks_of("s1", "notes/a.md", model_id=MODEL.model_id) == chunks
        assert await reopened.chunks_of("s1", "notes/b.md", model_id=MODEL.model_id) == []
        assert await reopened.chunks_of("s2", "x.md") == other_chunks
        hits = await reopened.search(
            ["s1"], vectors[2], limit=1, model_id=MODEL.model_id, path_prefix="notes/"
        )
        assert hits[0].chunk == chunks[2]
        # And it keeps accepting writes.
        await put(reopened, "s1", "notes/a.md", 1, seed=53)
        assert len(await reopened.chunks_of("s1", "notes/a.md", model_id=MODEL.model_id)) == 1
    finally:
        await reopened.close()


async def test_chunks_of_returns_every_chunk_by_index(index: VectorIndex) -> None:
    chunks = make_chunks("s1", "big.md", 40)
    shuffled = list(reversed(chunks))
    vectors = unit_vectors(40, 60)[::-1].copy()
    await index.replace_chunks(MODEL.model_id, "s1", "big.md", shuffled, vectors)
    assert await index.chunks_of("s1", "big.md") == chunks
    assert await index.chunks_of("s1", "other.md") == []


async def test_concurrent_writes_leave_each_path_exactly_its_last_chunks(
    index: VectorIndex,
) -> None:
    async def write(path: str, count: int, seed: int) -> None:
        await put(index, "s1", path, count, seed)

    await asyncio.gather(*(write(f"p{n % 5}.md", 1 + n % 4, n) for n in range(20)))
    for n in range(15, 20):
        assert len(await index.chunks_of("s1", f"p{n % 5}.md")) == 1 + n % 4


async def test_a_large_document_round_trips(index: VectorIndex) -> None:
    # More chunks than one Qdrant upsert batch or scroll page holds.
    chunks, vectors = await put(index, "s1", "big.md", 600, seed=70)
    assert await index.chunks_of("s1", "big.md") == chunks
    assert (await index.search(["s1"], vectors[599], limit=1))[0].chunk == chunks[599]
    smaller, _ = await put(index, "s1", "big.md", 10, seed=71)
    assert await index.chunks_of("s1", "big.md") == smaller


# --- NumpyVectorIndex specifics -------------------------------------------------------------


async def test_numpy_large_spaces_search_off_the_loop_and_stay_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numpy_index, "INLINE_SEARCH_ROWS", 100)
    index = NumpyVectorIndex(tmp_path / "v")
    await index.open()
    try:
        await index.ensure_collection(MODEL)
        await index.activate(MODEL.model_id)
        stored: list[tuple[Chunk, Vectors]] = []
        for n in range(30):
            chunks, vectors = await put(index, f"s{n % 3}", f"d{n}.md", 10, seed=200 + n)
            stored.extend(zip(chunks, vectors, strict=True))
        query = unit_vectors(1, 999)[0]
        hits, _ = await asyncio.gather(
            index.search(["s0", "s1"], query, limit=15),
            put(index, "s2", "d2.md", 3, seed=7),
        )
        expected = sorted(
            ((float(v @ query), c.chunk_id) for c, v in stored if c.space_id in {"s0", "s1"}),
            reverse=True,
        )[:15]
        assert [h.chunk.chunk_id for h in hits] == [cid for _, cid in expected]
    finally:
        await index.close()


async def test_numpy_ignores_a_half_created_collection(tmp_path: Path) -> None:
    root = tmp_path / "v"
    index = NumpyVectorIndex(root)
    await index.open()
    await index.ensure_collection(MODEL)
    await index.close()
    # A crash between mkdir and the database file, a drop that crashed after renaming the
    # collection away, and a stray alias temp file.
    (root / "collections" / "half-made").mkdir()
    shutil.copytree(
        next((root / "collections").glob("test-model-*")), root / "collections" / ".dropped-1"
    )
    (root / ".alias.json.deadbeef.tmp").write_text("{")
    reopened = NumpyVectorIndex(root)
    await reopened.open()
    try:
        assert await reopened.collections() == [MODEL]
        assert await reopened.active_model() is None
        assert sorted(p.name for p in (root / "collections").iterdir()) == [
            next((root / "collections").glob("test-model-*")).name
        ]
    finally:
        await reopened.close()


async def test_numpy_follows_another_process_writes_and_collections(tmp_path: Path) -> None:
    root = tmp_path / "v"
    writer = NumpyVectorIndex(root)
    await writer.open()
    await writer.ensure_collection(MODEL)
    await writer.activate(MODEL.model_id)
    old, _ = await put(writer, "s1", "gone.md", 2, seed=600)
    reader = NumpyVectorIndex(root, follow_seconds=0.02)
    await reader.open()
    try:
        chunks, vectors = await put(writer, "s1", "new.md", 3, seed=601)
        await writer.delete_chunks("s1", "gone.md")
        await put(writer, "s9", "x.md", 2, seed=602)
        await writer.delete_space("s9")

        async def seen() -> list[Chunk]:
            for _ in range(200):
                hits = await reader.search(["s1", "s9"], vectors[2], limit=10)
                if [h.chunk for h in hits][:1] == [chunks[2]] and len(hits) == 3:
                    return [h.chunk for h in hits]
                await asyncio.sleep(0.02)
            raise AssertionError("the reader never saw the writer's vectors")

        assert sorted(await seen(), key=lambda c: c.chunk_index) == chunks
        assert await reader.chunks_of("s1", "gone.md") == []
        assert old != chunks
        # A model switch made by the writer: new collection, then the alias.
        await writer.ensure_collection(OTHER)
        other, v4 = await put(writer, "s1", "new.md", 1, seed=603, model=OTHER)
        await writer.activate(OTHER.model_id)
        for _ in range(200):
            if await reader.active_model() == OTHER:
                break
            await asyncio.sleep(0.02)
        assert (await reader.search(["s1"], v4[0], limit=1))[0].chunk == other[0]
    finally:
        await reader.close()
        await writer.close()


async def test_numpy_follower_leaves_a_collection_another_process_is_creating(
    tmp_path: Path,
) -> None:
    """A collection whose database exists but whose info row is not written yet is being
    created by another process: a follower's catch-up used to remove it, losing the other
    process's new collection (and the model switch made on it)."""
    root = tmp_path / "v"
    writer = NumpyVectorIndex(root)
    await writer.open()
    await writer.ensure_collection(MODEL)
    reader = NumpyVectorIndex(root, follow_seconds=0.02)
    await reader.open()
    try:
        creating = root / numpy_index.COLLECTIONS_DIR / "being-created"
        creating.mkdir()
        (creating / numpy_index.DATABASE_FILE).write_bytes(b"")  # no schema, no info row yet
        for _ in range(10):  # several catch-ups
            await reader.search(["s1"], np.ones(DIM, dtype=np.float32), limit=1)
            await asyncio.sleep(0.03)
        assert (creating / numpy_index.DATABASE_FILE).is_file()
    finally:
        await reader.close()
        await writer.close()


async def test_numpy_follower_that_falls_behind_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numpy_index, "STALE_AFTER_SECONDS", 0.05)
    reader = NumpyVectorIndex(tmp_path / "v", follow_seconds=60)
    await reader.open()
    try:
        await reader.ensure_collection(MODEL)
        await reader.activate(MODEL.model_id)
        await asyncio.sleep(0.1)
        with pytest.raises(IndexUnavailable, match="has not read other processes' writes"):
            await reader.search(["s1"], unit_vectors(1, 1)[0], limit=3)
    finally:
        await reader.close()


# --- EdgeVectorIndex specifics --------------------------------------------------------------


async def test_edge_ignores_half_created_and_half_dropped_collections(tmp_path: Path) -> None:
    root = tmp_path / "v"
    index = EdgeVectorIndex(root, tuning=SMALL)
    await index.open()
    await index.ensure_collection(MODEL)
    await index.close()
    # A crash before the model file was written, and a drop that crashed after renaming the
    # collection away.
    (root / "edge" / "half-made" / "shard").mkdir(parents=True)
    shutil.copytree(next((root / "edge").glob("test-model-*")), root / "edge" / ".dropped-1")
    reopened = EdgeVectorIndex(root, tuning=SMALL)
    await reopened.open()
    try:
        assert await reopened.collections() == [MODEL]
        assert [p.name for p in (root / "edge").iterdir()] == [
            next((root / "edge").glob("test-model-*")).name
        ]
    finally:
        await reopened.close()


async def test_edge_refuses_a_second_owner_and_says_why(tmp_path: Path) -> None:
    owner = EdgeVectorIndex(tmp_path / "v", tuning=SMALL)
    await owner.open()
    try:
        await owner.ensure_collection(MODEL)
        second = EdgeVectorIndex(tmp_path / "v", tuning=SMALL)
        with pytest.raises(IndexUnavailable, match="open in another process"):
            await second.open()
        with pytest.raises(IndexUnavailable, match="not open"):
            await second.search(["s1"], unit_vectors(1, 1)[0], limit=3)
    finally:
        await owner.close()


async def test_edge_migrates_the_exact_index_it_finds(tmp_path: Path) -> None:
    root = tmp_path / "v"
    legacy = NumpyVectorIndex(root)
    await legacy.open()
    await legacy.ensure_collection(MODEL)
    await legacy.ensure_collection(OTHER)
    await legacy.activate(MODEL.model_id)
    stored = {
        n: await put(legacy, f"s{n % 3}", f"notes/d{n}.md", 3, seed=300 + n) for n in range(9)
    }
    other, _ = await put(legacy, "s1", "x.md", 2, seed=400, model=OTHER)
    await legacy.close()

    index = EdgeVectorIndex(root, tuning=SMALL)
    await index.open()
    try:
        assert await index.active_model() == MODEL
        assert await index.collections() == sorted([MODEL, OTHER], key=lambda m: m.model_id)
        for n, (chunks, vectors) in stored.items():
            assert await index.chunks_of(f"s{n % 3}", f"notes/d{n}.md") == chunks
            hits = await index.search([f"s{n % 3}"], vectors[1], limit=1, path_prefix="notes")
            assert hits[0].chunk == chunks[1]
        assert await index.chunks_of("s1", "x.md", model_id=OTHER.model_id) == other
        assert not (root / "collections").exists()
    finally:
        await index.close()


async def test_edge_ranks_like_exact_search_through_its_hnsw_index(tmp_path: Path) -> None:
    index = EdgeVectorIndex(tmp_path / "v", tuning=SMALL)
    await index.open()
    try:
        await index.ensure_collection(MODEL)
        await index.activate(MODEL.model_id)
        stored: list[tuple[Chunk, Vectors]] = []
        for n in range(40):
            chunks, vectors = await put(index, f"s{n % 2}", f"d{n}.md", 10, seed=500 + n)
            stored.extend(zip(chunks, vectors, strict=True))
        await index.optimize()
        query = unit_vectors(1, 998)[0]
        hits = await index.search(["s0"], query, limit=5)
        expected = sorted(
            ((float(v @ query), c.chunk_id) for c, v in stored if c.space_id == "s0"),
            reverse=True,
        )[:5]
        assert [h.chunk.chunk_id for h in hits] == [cid for _, cid in expected]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in expected], abs=1e-4)
    finally:
        await index.close()


# --- QdrantVectorIndex specifics ------------------------------------------------------------


async def test_qdrant_unreachable_server_is_index_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    index = QdrantVectorIndex.connect(
        f"http://127.0.0.1:{port}", timeout=2, check_compatibility=False
    )
    with pytest.raises(IndexUnavailable, match="qdrant open failed"):
        await index.open()
    with pytest.raises(IndexUnavailable):
        await index.ensure_collection(MODEL)
    with pytest.raises(IndexUnavailable):
        await index.search(["s1"], unit_vectors(1, 1)[0], limit=3)
    with pytest.raises(IndexUnavailable):
        await index.delete_chunks("s1", "a.md")
    await index.close()


def test_qdrant_names_and_keys_are_stable() -> None:
    index = QdrantVectorIndex(AsyncQdrantClient(location=":memory:"))
    assert index.collection_name("minilm-l6-v2-int8") == "engram-chunks-minilm-l6-v2-int8"
    # Sanitised ids carry a digest, so "a:b" and "a-b" never share a collection.
    assert index.collection_name("openai:text-embedding-3-small").startswith(
        "engram-chunks-openai-text-embedding-3-small-"
    )
    assert index.collection_name("a:b") != index.collection_name("a-b")
    assert point_id("doc:1") == point_id("doc:1") != point_id("doc:2")


async def test_delete_space_removes_the_space_from_every_collection(index: VectorIndex) -> None:
    await index.ensure_collection(OTHER)
    await put(index, "gone", "a.md", 3, seed=60)
    await put(index, "gone", "dir/b.md", 2, seed=61)
    await put(index, "gone", "a.md", 2, seed=62, model=OTHER)
    kept, kept_vectors = await put(index, "stays", "a.md", 2, seed=63)
    await index.delete_space("gone")
    for model in (MODEL, OTHER):
        for path in ("a.md", "dir/b.md"):
            assert await index.chunks_of("gone", path, model_id=model.model_id) == []
    assert await index.search(["gone"], kept_vectors[0], limit=10) == []
    assert await index.chunks_of("stays", "a.md") == kept
    await index.delete_space("gone")
    again, _ = await put(index, "gone", "a.md", 1, seed=64)
    assert await index.chunks_of("gone", "a.md") == again


async def test_indexed_documents_reads_the_active_or_named_collection(
    index: VectorIndex,
) -> None:
    assert await index.indexed_documents("s1") == {}
    await put(index, "s1", "a.md", 3, seed=40, document_id="d-a")
    await put(index, "s1", "b.md", 1, seed=41, document_id="d-b")
    await put(index, "s2", "a.md", 2, seed=42, document_id="d-o")
    await index.ensure_collection(OTHER)
    await put(index, "s1", "a.md", 2, seed=43, model=OTHER, document_id="d-a")
    assert await index.indexed_documents("s1") == {
        "a.md": IndexedDocument("d-a", 1, 3),
        "b.md": IndexedDocument("d-b", 1, 1),
    }
    assert await index.indexed_documents("s1", model_id=OTHER.model_id) == {
        "a.md": IndexedDocument("d-a", 1, 2)
    }
    await index.delete_chunks("s1", "a.md")
    assert set(await index.indexed_documents("s1")) == {"b.md"}
    assert await index.indexed_documents("s2") == {"a.md": IndexedDocument("d-o", 1, 2)}


async def test_indexed_documents_without_an_active_model_is_empty(
    index_factory: IndexFactory,
) -> None:
    opened = index_factory()
    await opened.open()
    try:
        assert await opened.indexed_documents("s1") == {}
    finally:
        await opened.close()
