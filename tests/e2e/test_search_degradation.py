"""`engram serve search` (the production composition) while OpenSearch misbehaves: hung, then
stopped mid-run, then restarted. Searches keep answering from the vector index with
`degraded=true` and come back to normal without restarting engram.

Runs on the session's OpenSearch from deploy/local (shared with other suites: it is always
resumed or restarted, and healthy again, when this test ends), MongoDB for the
authenticator, and Qdrant local mode for the vectors (no Qdrant server binary exists here).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from engram.app.production import search_on_backends
from engram.client import AsyncClient, SearchResults, Space
from engram.domain.chunking import build_chunks
from engram.domain.errors import EngramError
from engram.domain.spaces import SpaceRef, Visibility
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.vector.qdrant_index import QdrantVectorIndex
from engram.runtime.settings import Settings
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.timeout(240),
]

NOTES = SpaceRef(Visibility.PROJECT, "acme", "notes", project="p1")
DOCS = {
    "incidents/build.md": "Build 812 failed with ERR_4021 after the nightly upgrade.",
    "pets/rex.md": "My dog loves to chase tennis balls in the park every morning.",
    "cooking/risotto.md": "To make risotto, stir arborio rice with warm stock slowly.",
}
DEADLINE = 1.0  # the default; generous to the vector leg on a loaded machine
# Bounds on the waits below (OpenSearch restarts in 10-40 s on this machine).
RECOVERY_SECONDS = 60.0


async def populate(url: str, alias: str, vector: QdrantVectorIndex) -> None:
    keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0)
    await keyword.open()
    embedder = LocalOnnxEmbedder()
    try:
        await vector.ensure_collection(embedder.model)
        await vector.activate(embedder.model.model_id)
        for number, (path, content) in enumerate(DOCS.items()):
            chunks = build_chunks(
                space_id=NOTES.id,
                tenant=NOTES.tenant,
                path=path,
                document_id=f"doc-{number}",
                version=1,
                content=content,
            )
            vectors = await embedder.embed_documents([c.content for c in chunks])
            await keyword.replace_chunks(NOTES.id, path, chunks)
            await vector.replace_chunks(embedder.model.model_id, NOTES.id, path, chunks, vectors)
    finally:
        await keyword.close()
        embedder.close()


async def drop_index(url: str, alias: str) -> None:
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=f"{alias}-*", ignore_unavailable=True)
        await client.indices.delete_index_template(name=f"{alias}-template", ignore=[404])
    finally:
        await client.close()


@pytest.fixture
async def search_port(
    real_backends: RealBackends, tmp_path: Path
) -> AsyncIterator[tuple[int, RealBackends]]:
    url = real_backends.url("opensearch")
    real_backends.running("opensearch")  # this test must control the process
    alias = f"engram-degrade-{uuid.uuid4().hex[:10]}"
    settings = server_settings(
        tmp_path / "engram",
        opensearch_url=url,
        opensearch_index=alias,
        opensearch_replicas=0,
        mongo_uri=real_backends.url("mongo"),
        mongo_db=f"engram_test_{uuid.uuid4().hex[:12]}",
        jwt_secret=TEST_JWT_SECRET,
        search_backend_timeout_seconds=DEADLINE,
    )
    vector = QdrantVectorIndex(AsyncQdrantClient(path=str(tmp_path / "qdrant")))
    await vector.open()
    await populate(url, alias, vector)
    try:
        async with search_on_backends(settings, vector=vector) as server:
            yield server.port, real_backends
    finally:
        running = real_backends.running("opensearch")
        if not running.healthy():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.pid, signal.SIGCONT)
        if not await asyncio.to_thread(running.healthy, 10.0):
            running.stop()
            await asyncio.to_thread(real_backends.restart, "opensearch")
        await drop_index(url, alias)


async def test_searches_degrade_while_opensearch_is_down_and_recover_after(
    search_port: tuple[int, RealBackends],
) -> None:
    port, real_backends = search_port
    opensearch = real_backends.running("opensearch")
    token = mint("ann", tenant="acme", role="viewer")
    async with AsyncClient(
        f"127.0.0.1:{port}",
        token=token,
        space=Space("project", "notes", project="p1"),
        timeout=10,
        retries=0,
    ) as client:

        async def search() -> SearchResults:
            return await client.search("ERR_4021 build", limit=3)

        async def until_normal() -> SearchResults:
            deadline = time.monotonic() + RECOVERY_SECONDS
            while True:
                response = await search()
                if not response.degraded or time.monotonic() > deadline:
                    return response
                await asyncio.sleep(0.2)

        normal = await until_normal()  # the first one also loads the embedding model
        assert not normal.degraded
        assert normal.results[0].path == "incidents/build.md"
        assert normal.results[0].bm25_rank == 1 and normal.results[0].vector_rank == 1

        # Hung: the process is paused, requests get no answer; the deadline cuts them off.
        os.killpg(opensearch.pid, signal.SIGSTOP)
        try:
            started = time.perf_counter()
            hung = await search()
            elapsed = time.perf_counter() - started
        finally:
            os.killpg(opensearch.pid, signal.SIGCONT)
        assert hung.degraded
        assert hung.degraded_reasons == (f"keyword index: no answer within {DEADLINE:g}s",)
        assert DEADLINE <= elapsed < DEADLINE + 1.5
        assert hung.results and all(r.bm25_rank == 0 and r.vector_rank > 0 for r in hung.results)
        assert not (await until_normal()).degraded

        # Stopped mid-run: a steady stream of searches, all answered.
        answers: list[SearchResults] = []
        stop_searching = asyncio.Event()

        async def keep_searching() -> None:
            while not stop_searching.is_set():
                answers.append(await search())
                await asyncio.sleep(0.05)

        searcher = asyncio.create_task(keep_searching())
        try:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(opensearch.stop)
            await asyncio.sleep(1.0)
            down = len(answers)
            degraded = await search()
            assert degraded.degraded and len(degraded.degraded_reasons) == 1
            assert degraded.degraded_reasons[0].startswith("keyword index: OpenSearch")
            assert [r.path for r in degraded.results][:1] == ["incidents/build.md"]
            await asyncio.to_thread(real_backends.restart, "opensearch")
            recovered = await until_normal()
        finally:
            stop_searching.set()
            await searcher
        assert not recovered.degraded, recovered.degraded_reasons
        assert recovered.results[0].bm25_rank == 1
        assert any(a.degraded for a in answers[:down]) and any(not a.degraded for a in answers)
        assert all(a.results for a in answers), "every search answered with results"


async def test_missing_backend_settings_are_named() -> None:
    settings = Settings(opensearch_url=None, qdrant_url=None, mongo_uri=None)
    with pytest.raises(EngramError) as caught:
        async with search_on_backends(settings):
            pass
    for name in ("ENGRAM_OPENSEARCH_URL", "ENGRAM_QDRANT_URL", "ENGRAM_MONGO_URI"):
        assert name in caught.value.message


async def test_search_asking_authz_and_the_indexer_needs_no_mongodb() -> None:
    """Issue 34: with ENGRAM_AUTHZ_ADDR and ENGRAM_INDEXER_ADDR search reads no database, so
    ENGRAM_MONGO_URI is not among what it misses; the indexer is asked as the service
    principal, so its token is."""
    settings = Settings(
        opensearch_url=None,
        qdrant_url=None,
        mongo_uri=None,
        service_token=None,
        authz_addr="127.0.0.1:1",
        indexer_addr="127.0.0.1:2",
    )
    with pytest.raises(EngramError) as caught:
        async with search_on_backends(settings):
            pass
    assert "ENGRAM_SERVICE_TOKEN" in caught.value.message
    assert "ENGRAM_MONGO_URI" not in caught.value.message
