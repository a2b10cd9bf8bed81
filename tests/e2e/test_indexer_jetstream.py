"""`engram serve indexer`'s composition on real backends: storage on FerretDB publishing to
NATS JetStream, the indexer reading documents through StorageService as a service principal,
writing OpenSearch and Qdrant (local mode), acking after both hold the change, retrying with
backoff (waiting out a backend outage in place without using up an event's attempts), and
dead-lettering an event after `max_deliver` failed attempts."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from opensearchpy import AsyncOpenSearch
from prometheus_client import REGISTRY

from engram.app.production import indexer_on_backends, storage_on_mongo
from engram.client import AsyncClient, Space
from engram.domain.chunking import build_chunks
from engram.domain.chunks import Chunk
from engram.domain.errors import EngramError
from engram.indexer.jetstream_consumer import DEAD_LETTER_STREAM, DEAD_LETTER_SUBJECT
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.runtime.settings import Settings
from engram.storage.mongo_repository import MongoDocumentRepository
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    # Qdrant local mode ignores payload indexes and says so; the server needs them.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

STREAM = "ENGRAM_DOCS"
SPACE_ID = "v1:private:acme::::notes"
MEMBER_TOKEN = mint("ann", "acme", "member")
MEMBER = bearer(MEMBER_TOKEN)
OPERATOR_TOKEN = mint("root", "acme", "admin", platform_admin=True)
NOTES = Space(name="notes")


def engram_client(port: int, token: str = MEMBER_TOKEN) -> AsyncClient:
    """engram.client on a server of the deployment, as ann (a member of acme) in notes."""
    return AsyncClient(f"127.0.0.1:{port}", token=token, space=NOTES)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Deployment:
    """Storage and one indexer on real backends, sharing a fresh database and index alias."""

    def __init__(self, tmp_path: Path, backends: RealBackends) -> None:
        run = uuid.uuid4().hex[:10]
        self.tmp_path = tmp_path
        self.storage_port = free_port()
        self.common: dict[str, Any] = {
            "mongo_uri": backends.url("mongo"),
            "mongo_db": f"indexer_{run}",
            "nats_url": backends.url("nats"),
            "jwt_secret": TEST_JWT_SECRET,
        }
        self.indexer_settings = server_settings(
            tmp_path / "indexer",
            **self.common,
            opensearch_url=backends.url("opensearch"),
            opensearch_index=f"t{run}-chunks",
            opensearch_replicas=0,
            qdrant_path=tmp_path / "qdrant",
            storage_addr=f"127.0.0.1:{self.storage_port}",
            service_token=service_token(),
            indexer_durable=f"indexer-{run}",
            indexer_ack_wait_seconds=5.0,
            indexer_retry_base_seconds=0.1,
            indexer_retry_max_seconds=1.0,
            shutdown_grace_seconds=2.0,
        )

    def storage_settings(self) -> Settings:
        return server_settings(
            self.tmp_path / "storage", grpc_port=self.storage_port, **self.common
        )

    def indexer(self, **overrides: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        settings = self.indexer_settings.model_copy(update=overrides)
        return indexer_on_backends(settings)

    async def lose_keyword_index(self) -> None:
        """The OpenSearch index is lost: deleted, then created again empty (with its alias)."""
        alias = self.indexer_settings.opensearch_index
        client = AsyncOpenSearch(hosts=[self.indexer_settings.opensearch_url])
        try:
            await client.indices.delete(index=f"{alias}-000001")
        finally:
            await client.close()
        await (await self.keyword()).close()

    async def keyword(self) -> OpenSearchKeywordIndex:
        index = OpenSearchKeywordIndex(
            self.indexer_settings.opensearch_url or "",
            alias=self.indexer_settings.opensearch_index,
            replicas=0,
        )
        await index.open()
        return index


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    deployment = Deployment(tmp_path, real_backends)
    client = await nats.connect(deployment.common["nats_url"])
    try:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await client.jetstream().purge_stream(STREAM)
        yield deployment
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await client.jetstream().delete_consumer(
                STREAM, deployment.indexer_settings.indexer_durable
            )
    finally:
        await client.close()


async def expected_chunks(deployment: Deployment, path: str) -> list[Chunk]:
    from engram.backends.mongo import connect

    client, database = connect(deployment.common["mongo_uri"], deployment.common["mongo_db"])
    try:
        document = await MongoDocumentRepository(database, retention=50).get(SPACE_ID, path)
    finally:
        await client.close()
    if document is None:
        return []
    return build_chunks(
        space_id=SPACE_ID,
        tenant="acme",
        path=path,
        document_id=document.document_id,
        version=document.version,
        content=document.content,
    )


async def eventually(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.1)


async def converged(deployment: Deployment, engram_indexer: AsyncClient, path: str) -> bool:
    expected = await expected_chunks(deployment, path)
    keyword = await deployment.keyword()
    try:
        held = await keyword.chunks_of(SPACE_ID, path)
    finally:
        await keyword.close()
    if held != expected:
        return False
    status = await engram_indexer.index_status()
    return bool(status.active_model) and status.backlog == 0


async def test_indexer_follows_changes_and_reindexes(deployment: Deployment) -> None:
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        deployment.indexer() as indexer_server,
        engram_client(storage_server.port) as storage,
        engram_client(indexer_server.port) as indexer,
    ):
        body = "".join(
            f"Entry {i}: deployed the billing service, noted retries.\n" for i in range(40)
        )
        for path in ("a.md", "b.md", "c.md"):
            await storage.write_document(path, body + path)
        await storage.write_document("a.md", "short now")
        await storage.delete_document("c.md")
        for path in ("a.md", "b.md", "c.md"):
            await eventually(
                lambda path=path: converged(deployment, indexer, path), 60, f"{path} indexed"
            )
        assert len(await expected_chunks(deployment, "b.md")) >= 4

        # The keyword index is lost (deleted and created again, empty); a reindex of the
        # space brings its documents back.
        await deployment.lose_keyword_index()
        assert await indexer.reindex([NOTES]) == 2
        for path in ("a.md", "b.md"):
            await eventually(
                lambda path=path: converged(deployment, indexer, path), 60, f"{path} reindexed"
            )
        async with engram_client(indexer_server.port, OPERATOR_TOKEN) as operator:
            assert await operator.reindex(all=True) == 2
        status = await indexer.index_status()
        assert status.active_model == "minilm-l6-v2-int8"
        assert list(status.collections) == ["minilm-l6-v2-int8"]


async def test_a_storage_outage_is_retried_until_it_ends(deployment: Deployment) -> None:
    async with storage_on_mongo(deployment.storage_settings()) as storage_server:
        async with engram_client(storage_server.port) as storage:
            await storage.write_document("late.md", "written before")
            await eventually(lambda: _stream_has(deployment, 1), 20, "the event reached JetStream")
    # Storage is down: the indexer's reads fail with UNAVAILABLE and the run waits in place.
    # One delivery is the whole budget here: an outage must not use it up (before, an
    # OpenSearch restart longer than the retry budget dead-lettered its events).
    before = REGISTRY.get_sample_value("engram_indexer_dead_letters_total") or 0.0
    async with deployment.indexer(indexer_max_deliver=1) as indexer_server:
        async with engram_client(indexer_server.port) as indexer:
            await asyncio.sleep(2.0)
            assert not await converged(deployment, indexer, "late.md")
            async with storage_on_mongo(deployment.storage_settings()):
                await eventually(
                    lambda: converged(deployment, indexer, "late.md"), 60, "indexed after"
                )
    after = REGISTRY.get_sample_value("engram_indexer_dead_letters_total") or 0.0
    assert after == before, "an outage dead-lettered an event"


async def test_an_event_failing_max_deliver_times_is_dead_lettered(
    deployment: Deployment,
) -> None:
    before = REGISTRY.get_sample_value("engram_indexer_dead_letters_total") or 0.0
    doomed = f"doomed-{uuid.uuid4().hex[:8]}.md"
    client = await nats.connect(deployment.common["nats_url"])
    try:
        js = client.jetstream()
        async with storage_on_mongo(deployment.storage_settings()) as storage_server:
            async with engram_client(storage_server.port) as storage:
                await storage.write_document(doomed, "x")
        letters: list[Any] = []
        # The indexer cannot reach storage at all (nothing listens on its address).
        async with deployment.indexer(
            storage_addr=f"127.0.0.1:{free_port()}",
            indexer_max_deliver=3,
            # Give up waiting out the outage at once: each failure is an attempt.
            indexer_outage_wait_seconds=0,
        ):

            async def dead_lettered() -> bool:
                with contextlib.suppress(nats.js.errors.NotFoundError, TimeoutError):
                    subscription = await js.pull_subscribe(
                        DEAD_LETTER_SUBJECT, durable=None, stream=DEAD_LETTER_STREAM
                    )
                    try:
                        for message in await subscription.fetch(1000, timeout=1):
                            if doomed.encode() in message.data:
                                letters.append(message)
                    finally:
                        await subscription.unsubscribe()
                return bool(letters)

            await eventually(dead_lettered, 30, "the event was dead-lettered")
        headers = letters[0].headers or {}
        assert headers["Engram-Deliveries"] == "3"
        assert "StorageService.ReadDocument failed: UNAVAILABLE" in headers["Engram-Error"]
        assert headers["Engram-Subject"].startswith("engram.docs.upsert.")
        after = REGISTRY.get_sample_value("engram_indexer_dead_letters_total") or 0.0
        assert after >= before + 1
        info = await js.consumer_info(STREAM, deployment.indexer_settings.indexer_durable)
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        await client.close()


async def test_missing_settings_fail_fast_naming_them(tmp_path: Path) -> None:
    with pytest.raises(EngramError) as caught:
        async with indexer_on_backends(server_settings(tmp_path)):
            pass
    message = caught.value.message
    for name in (
        "ENGRAM_NATS_URL",
        "ENGRAM_MONGO_URI",
        "ENGRAM_OPENSEARCH_URL",
        "ENGRAM_STORAGE_ADDR",
        "ENGRAM_SERVICE_TOKEN",
        "ENGRAM_QDRANT_URL",
        "ENGRAM_VECTOR_DIR",
    ):
        assert name in message, "every missing variable, in one message"
    with pytest.raises(EngramError, match="ENGRAM_QDRANT_URL"):
        async with indexer_on_backends(
            server_settings(
                tmp_path,
                nats_url="nats://127.0.0.1:1",
                mongo_uri="mongodb://127.0.0.1:1/",
                opensearch_url="http://127.0.0.1:1",
                storage_addr="127.0.0.1:1",
                service_token="x",
            )
        ):
            pass


async def _stream_has(deployment: Deployment, count: int) -> bool:
    client = await nats.connect(deployment.common["nats_url"])
    try:
        info = await client.jetstream().stream_info(STREAM)
        return int(info.state.messages) >= count
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await client.close()
