"""Switching the embedding model: `engram dev` restarted with another embedder fills the new
model's collection behind the alias while searches keep answering, then moves the alias and
drops the old collection.

The second embedder is an OpenAI-compatible HTTP API. No hosted provider is reachable from
tests, so `MockOpenAIEmbeddingsServer` stands in for that third-party service only; it
serves real vectors (the local model's, cut to 256 dimensions and re-normalised), so
semantic search over the new collection still finds the right documents.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from engram.app.embedded import embedded_engram
from engram.app.parts import Indexing
from engram.client import AsyncClient, EngramError, Space, explain
from engram.domain.chunking import build_chunks
from engram.domain.chunks import ModelInfo, ScoredChunk
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexes.ports import IndexModelMismatch
from tests.support.settings import server_settings

pytestmark = pytest.mark.e2e

OLD_MODEL = "minilm-l6-v2-int8"
NEW_MODEL = "openai:mock-embed-256"
SPACES = [Space(name="s0"), Space(name="s1"), Space(name="s2")]
TOPICS = ["billing retries", "deploy rollback", "oncall rota", "tea preferences", "gpu quota"]


class MockOpenAIEmbeddingsServer:
    """A mock of a hosted OpenAI-compatible embeddings API (`POST /v1/embeddings`), serving
    the local model's vectors truncated to `dimension` and re-normalised. Requests wait
    while `gate` is clear, so a test can hold a switch in progress."""

    def __init__(self, local: LocalOnnxEmbedder, *, dimension: int = 256) -> None:
        self._local = local
        self._dimension = dimension
        self.gate = asyncio.Event()
        self.gate.set()
        self.texts = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        await self.gate.wait()
        vectors = (await self._local.embed_documents(texts))[:, : self._dimension]
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.texts += len(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(vectors)
        ]
        return web.json_response({"object": "list", "model": body["model"], "data": data})


def document(topic: str, i: int) -> str:
    return (
        f"# Note {i} on {topic}\n\nThe team discussed {topic} at length on day {i}. "
        f"Decisions about {topic} were recorded, with owners and dates, and the follow-up "
        f"review of {topic} is scheduled for next week.\n"
    )


async def expected(indexing: Indexing, engram: Any, space_id: str, path: str) -> Any:
    current = await engram.core.repository.get(space_id, path)
    return build_chunks(
        space_id=space_id,
        tenant="local",
        path=path,
        document_id=current.document_id,
        version=current.version,
        content=current.content,
    )


async def index_with_the_local_model(data_dir: Path, paths: list[tuple[str, str]]) -> None:
    """Phase 1: every document written and indexed with the local model."""
    async with embedded_engram(server_settings(data_dir)) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}") as storage:
            for i, (space_id, path) in enumerate(paths):
                ref = Space(name=space_id.rsplit(":", 1)[1])
                await storage.write_document(path, document(TOPICS[i % len(TOPICS)], i), space=ref)
        assert await engram.relay.drained(60)


@dataclass
class Searches:
    """Searches running through the switch: straight on the indexes, as search does, and
    through SearchService. `used` holds the model each direct search answered from."""

    indexing: Indexing
    space_ids: list[str]
    used: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    grpc_answers: list[int] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def search_once(self) -> tuple[ModelInfo, list[ScoredChunk]]:
        active = await self.indexing.vector.active_model()
        assert active is not None
        embedder = self.indexing.models.for_model(active)
        assert embedder is not None, f"no query embedder for {active}"
        query = await embedder.embed_query("who owns the deploy rollback")
        hits = await self.indexing.vector.search(
            self.space_ids, query, limit=5, model_id=active.model_id
        )
        return active, hits

    async def search_forever(self) -> None:
        """What search does (engram.search.service): embed the query with the active
        model's embedder, search that model's collection by name; a search that read
        the alias before the old collection was dropped (a slow one outlives the drop
        grace) is told so and reads the alias again, once."""
        while not self.done.is_set():
            try:
                try:
                    active, hits = await self.search_once()
                except IndexModelMismatch:
                    active, hits = await self.search_once()
                    assert active.model_id == NEW_MODEL, "retried on the old model"
                assert hits, "a search found nothing"
                assert "deploy rollback" in hits[0].chunk.content
                self.used.append(active.model_id)
            except Exception as error:  # noqa: BLE001 - every failure is reported
                self.failures.append(repr(error))
            await asyncio.sleep(0.01)

    async def search_grpc_forever(self, client: AsyncClient) -> None:
        # No retries: every failed search is reported.
        once = client.with_options(retries=0)
        while not self.done.is_set():
            try:
                response = await once.search("deploy rollback owners", spaces=SPACES, limit=5)
                self.grpc_answers.append(len(response.results))
                # A slow search may time a leg out on a busy machine, but the switch
                # itself must never take the vector leg away.
                vanished = [r for r in response.degraded_reasons if "collection" in r]
                if vanished:
                    self.failures.append(f"SearchService degraded: {vanished}")
            except EngramError as error:
                self.failures.append(f"SearchService: {explain(error)}")
            await asyncio.sleep(0.02)


async def switch_while_searching(
    engram: Any, client: AsyncClient, searches: Searches, mock: MockOpenAIEmbeddingsServer
) -> None:
    """Phase 2: the switch held until searches answer from the old model, a write during
    it, then released; returns once the old collection is dropped and the searchers have
    stopped."""
    indexing = searches.indexing
    searchers = [
        asyncio.create_task(searches.search_forever()),
        asyncio.create_task(searches.search_grpc_forever(client)),
    ]
    status = await client.index_status()
    assert status.active_model == OLD_MODEL
    assert status.pending_model == NEW_MODEL
    assert set(status.collections) == {OLD_MODEL, NEW_MODEL}
    # Searches answer from the old model meanwhile (a few, however slow the
    # machine, before the switch may go on).
    deadline = time.monotonic() + 60
    while len(searches.used) < 3 and not searches.failures:
        assert time.monotonic() < deadline, "no search answered before the switch"
        await asyncio.sleep(0.02)
    # Changes during the switch go to both collections.
    await client.write_document("notes/late.md", document("gpu quota", 99), space=Space(name="s1"))
    mock.gate.set()
    assert indexing.switch is not None  # the test asserted it on the restart
    await asyncio.wait_for(indexing.switch.completed.wait(), 60)
    deadline = time.monotonic() + 30
    while [m.model_id for m in await indexing.vector.collections()] != [NEW_MODEL]:
        assert time.monotonic() < deadline, "the old collection was not dropped"
        await asyncio.sleep(0.05)
    assert await engram.relay.drained(30)
    used_before = len(searches.used)
    for _ in range(500):  # a few more searches on the new model
        if len(searches.used) >= used_before + 5:
            break
        await asyncio.sleep(0.02)
    searches.done.set()
    await asyncio.gather(*searchers)


async def assert_switched(
    engram: Any,
    client: AsyncClient,
    searches: Searches,
    mock: MockOpenAIEmbeddingsServer,
    paths: list[tuple[str, str]],
) -> None:
    """Every search answered, from the old model then only the new one; the new collection
    alone holds every document's chunks; queries are embedded by the hosted model."""
    indexing = searches.indexing
    used = searches.used
    assert not searches.failures, searches.failures[:5]
    assert used[0] == OLD_MODEL and used[-1] == NEW_MODEL
    switched_at = used.index(NEW_MODEL)
    assert set(used[switched_at:]) == {NEW_MODEL}, "back to the old model"
    assert searches.grpc_answers and all(count > 0 for count in searches.grpc_answers)
    status = await client.index_status()
    assert (status.active_model, status.dimension) == (NEW_MODEL, 256)
    assert status.pending_model == "" and list(status.collections) == [NEW_MODEL]
    for space_id, path in [*paths, ("v1:private:local::::s1", "notes/late.md")]:
        chunks = await indexing.vector.chunks_of(space_id, path, model_id=NEW_MODEL)
        assert chunks == await expected(indexing, engram, space_id, path)
    # Query embeddings now come from the hosted model.
    before = mock.texts
    await client.search("tea preferences", spaces=[Space(name="s0")])
    assert mock.texts == before + 1


@pytest.mark.timeout(120)
async def test_switching_the_model_keeps_search_answering(tmp_path: Path) -> None:
    data_dir = tmp_path / "engram"
    paths = [(f"v1:private:local::::s{i % 3}", f"notes/{i:02d}.md") for i in range(30)]

    # 1. Indexed with the local model.
    await index_with_the_local_model(data_dir, paths)

    local = LocalOnnxEmbedder()
    mock = MockOpenAIEmbeddingsServer(local)
    await mock.start()
    mock.gate.clear()  # hold the switch in progress until searches are running
    settings = server_settings(
        data_dir,
        embedder_provider="openai",
        openai_base_url=mock.url,
        openai_model="mock-embed-256",
        openai_dimension=256,
        indexer_model_drop_grace_seconds=0.5,
    )
    try:
        # 2. Restarted on the hosted model: a switch starts behind the alias.
        async with embedded_engram(settings) as engram:
            indexing = engram.indexing
            assert isinstance(indexing, Indexing)
            assert indexing.switch is not None
            searches = Searches(indexing, sorted({space_id for space_id, _ in paths}))
            async with AsyncClient(f"127.0.0.1:{engram.port}") as client:
                await switch_while_searching(engram, client, searches, mock)
                await assert_switched(engram, client, searches, mock, paths)

        # 3. A restart on the same model finds the switch done.
        async with embedded_engram(settings) as engram:
            indexing = engram.indexing
            assert isinstance(indexing, Indexing)
            assert indexing.switch is None and indexing.models.pending is None
            assert [m.model_id for m in await indexing.vector.collections()] == [NEW_MODEL]
    finally:
        await mock.stop()
        local.close()
