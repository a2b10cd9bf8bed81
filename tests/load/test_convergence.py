"""Convergence: after any mix of writes, appends and deletes - with duplicated and reordered
events, several workers, and a worker killed mid-flight - every document's chunks in both
indexes equal `chunk(current content)`, and deleted documents have none.

1. Two `engram serve indexer` processes on real NATS JetStream (one durable consumer),
   FerretDB (storage and embedding cache), OpenSearch, and the embedded vector index in a
   directory both processes share (its SQLite file takes each replace as one transaction;
   the check reopens it from disk). 1,000 random operations over 100 documents while extra
   copies of past events are re-published out of order; one worker is SIGKILLed midway and
   started again.
2. One process, two `IndexWorker`s (separate per-document locks, like two replicas) sharing
   tantivy and Qdrant local mode, fed every event of 300 operations over 30 documents one
   to three times, each copy after a random delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import nats
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opensearchpy import AsyncOpenSearch
from prometheus_client import REGISTRY
from qdrant_client import AsyncQdrantClient

from engram.app.embedded import build_core
from engram.app.production import storage_on_mongo
from engram.backends.mongo import connect
from engram.client import AsyncClient, NotFound, Space
from engram.domain.chunking import build_chunks
from engram.domain.chunks import Chunk
from engram.domain.documents import DocumentEvent, StoredDocument
from engram.domain.errors import DocumentNotFound
from engram.domain.principals import LOCAL_ADMIN
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.events.jetstream import ensure_stream
from engram.events.ports import OutboxMessage
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexer.embedding_cache import CachedEmbedder, SqliteEmbeddingCache
from engram.indexer.models import IndexModels
from engram.indexer.sources import RepositoryDocumentSource
from engram.indexer.worker import IndexWorker, coalesce, read_event
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.indexes.vector.qdrant_index import QdrantVectorIndex
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.service import WriteMode
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = [
    pytest.mark.load,
    # Qdrant local mode ignores payload indexes and says so; the server needs them.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

STREAM = "ENGRAM_DOCS"
MEMBER = mint("ann", "acme", "member")
# The workers embed with short inputs and one thread each: the test is about convergence,
# and two processes share two cores with NATS, FerretDB and OpenSearch.
EMBED_MAX_LENGTH = 64

WORDS = (
    "agent memory deploy rollback billing retry incident review owner schedule cluster "
    "shard replica backup restore budget latency error alert metric report plan design "
    "token model vector chunk index search query space note daily team project user"
).split()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def body(rng: random.Random) -> str:
    """100 to ~1,600 characters in a few paragraphs and lines: 1 to 4 chunks."""
    lines = []
    for _ in range(rng.randint(1, 12)):
        lines.append(sentence(rng, 3, 20) + ("\n\n" if rng.random() < 0.3 else "\n"))
    return "".join(lines)


def expected_chunks(document: StoredDocument | None) -> list[Chunk]:
    if document is None:
        return []
    return build_chunks(
        space_id=document.space_id,
        tenant=document.space.tenant,
        path=document.path,
        document_id=document.document_id,
        version=document.version,
        content=document.content,
    )


# --- 1. two indexer processes on the production backends ------------------------------------


class Workers:
    """`engram serve indexer` processes sharing one configuration."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.processes: dict[int, tuple[subprocess.Popen[bytes], int]] = {}

    async def start(self, number: int) -> None:
        port = free_port()
        command = [sys.executable, "-m", "engram", "serve", "indexer", "--port", str(port)]
        process = await asyncio.to_thread(self._spawn, command, number)
        self.processes[number] = (process, port)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, self.log_tail(number)
                try:
                    answer = await health.Check(
                        health_pb2.HealthCheckRequest(service="engram.v1.IndexerService"),
                        timeout=1,
                    )
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                assert time.monotonic() < deadline, self.log_tail(number)
                await asyncio.sleep(0.2)

    def _spawn(self, command: list[str], number: int) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"indexer-{number}.log", "ab") as log:
            return subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL, stderr=log)

    def kill(self, number: int) -> None:
        process, _ = self.processes[number]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    async def stop_all(self) -> None:
        for process, _ in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for number, (process, _) in self.processes.items():
            try:
                await asyncio.to_thread(process.wait, 20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
                raise AssertionError(f"indexer {number} ignored SIGTERM") from None

    def kill_all(self) -> None:
        for process, _ in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)

    def log_tail(self, number: int) -> str:
        text = (self.log_dir / f"indexer-{number}.log").read_text(errors="replace")
        return text[-3000:]


async def republish_forever(
    js: Any, seen: list[tuple[str, bytes]], rng: random.Random, total: int, stop: asyncio.Event
) -> int:
    """Publishes copies of random past events (new message ids, so JetStream keeps them) until
    `total` copies went out or `stop` is set: duplicates, arriving out of order."""
    sent = 0
    while sent < total and not stop.is_set():
        await asyncio.sleep(rng.uniform(0.01, 0.08))
        if not seen:
            continue
        for subject, data in rng.sample(seen, min(len(seen), rng.randint(1, 4))):
            await js.publish(
                subject, data, stream=STREAM, headers={"Nats-Msg-Id": f"dup-{uuid.uuid4().hex}"}
            )
            sent += 1
    return sent


@pytest.fixture
async def clean_stream(real_backends: RealBackends) -> AsyncIterator[Any]:
    client = await nats.connect(real_backends.url("nats"))
    try:
        # The stream storage creates, made here so the test does not depend on running after
        # another one that created it.
        await ensure_stream(client)
        await client.jetstream().purge_stream(STREAM)
        yield client
    finally:
        await client.close()


@dataclass(frozen=True)
class ProductionRun:
    """One run's names on the shared backends, and where its processes find them."""

    nats_url: str
    storage_port: int
    mongo_uri: str
    mongo_db: str
    opensearch_url: str
    alias: str
    vector_dir: Path
    durable: str

    @classmethod
    def new(cls, real_backends: RealBackends, tmp_path: Path) -> ProductionRun:
        run = uuid.uuid4().hex[:10]
        storage_port = free_port()
        mongo_uri, mongo_db = real_backends.url("mongo"), f"converge_{run}"
        opensearch_url, alias = real_backends.url("opensearch"), f"c{run}-chunks"
        return cls(
            nats_url=real_backends.url("nats"),
            storage_port=storage_port,
            mongo_uri=mongo_uri,
            mongo_db=mongo_db,
            opensearch_url=opensearch_url,
            alias=alias,
            vector_dir=tmp_path / "vectors",
            durable=f"indexer-{run}",
        )

    def indexer_env(self) -> dict[str, str]:
        """The environment of every `engram serve indexer` process."""
        return {
            **os.environ,
            "ENGRAM_NATS_URL": self.nats_url,
            "ENGRAM_MONGO_URI": self.mongo_uri,
            "ENGRAM_MONGO_DB": self.mongo_db,
            "ENGRAM_OPENSEARCH_URL": self.opensearch_url,
            "ENGRAM_OPENSEARCH_INDEX": self.alias,
            "ENGRAM_OPENSEARCH_REPLICAS": "0",
            "ENGRAM_VECTOR_DIR": str(self.vector_dir),
            "ENGRAM_STORAGE_ADDR": f"127.0.0.1:{self.storage_port}",
            "ENGRAM_SERVICE_TOKEN": service_token(),
            "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
            "ENGRAM_METRICS_PORT": "0",
            "ENGRAM_ACCESS_LOG": "false",
            "ENGRAM_INDEXER_DURABLE": self.durable,
            "ENGRAM_INDEXER_ACK_WAIT_SECONDS": "3",
            "ENGRAM_INDEXER_RETRY_BASE_SECONDS": "0.1",
            "ENGRAM_INDEXER_RETRY_MAX_SECONDS": "2",
            "ENGRAM_INDEXER_MAX_DELIVER": "20",
            "ENGRAM_EMBED_THREADS": "1",
            "ENGRAM_EMBED_MAX_LENGTH": str(EMBED_MAX_LENGTH),
            "ENGRAM_SHUTDOWN_GRACE_SECONDS": "3",
        }


async def write_through_chaos_and_sigkill(
    engram: AsyncClient,
    workers: Workers,
    js: Any,
    seen: list[tuple[str, bytes]],
    documents: list[tuple[str, str]],
    rng: random.Random,
) -> None:
    """600 operations from eight writers while past events are re-published; indexer 1 is
    SIGKILLed after 300 and started again."""
    operations = [(rng.choice(documents), rng.random()) for _ in range(600)]
    done = 0
    half = asyncio.Event()
    stop_chaos = asyncio.Event()

    async def writer(mine: Sequence[tuple[tuple[str, str], float]]) -> None:
        nonlocal done
        local = random.Random(rng.random())
        for (name, path), dice in mine:
            ref = Space(name=name)
            # Only a delete of a document already gone may fail (NotFound).
            with contextlib.suppress(NotFound):
                if dice < 0.5:
                    content = sentence(local, 2, 12) + "\n"
                    await engram.write_document(path, content, append=True, space=ref)
                elif dice < 0.8:
                    await engram.write_document(path, body(local), space=ref)
                else:
                    await engram.delete_document(path, space=ref)
            done += 1
            if done >= 300:
                half.set()

    chaos = asyncio.create_task(republish_forever(js, seen, random.Random(7), 300, stop_chaos))
    writers = [asyncio.create_task(writer(operations[w::8])) for w in range(8)]
    await asyncio.wait_for(half.wait(), 400)
    workers.kill(1)  # mid-flight: its unacknowledged events come back later
    await asyncio.sleep(1.0)
    await workers.start(1)
    await asyncio.gather(*writers)
    stop_chaos.set()
    republished = await chaos
    assert republished > 50


async def quiesce_and_read(
    setup: ProductionRun, workers: Workers, js: Any, documents: list[tuple[str, str]]
) -> dict[tuple[str, str], StoredDocument | None]:
    """Waits until storage published everything and the consumer has nothing undelivered or
    unacknowledged, twice in a row; stops the workers; returns every document's state."""
    client, database = connect(setup.mongo_uri, setup.mongo_db)
    repository = MongoDocumentRepository(database, retention=50)
    try:
        quiet = 0
        deadline = time.monotonic() + 300
        while quiet < 2:
            assert time.monotonic() < deadline, workers.log_tail(2)
            await asyncio.sleep(1.0)
            info = await js.consumer_info(STREAM, setup.durable)
            idle = (
                await repository.outbox_backlog() == 0
                and info.num_pending == 0
                and info.num_ack_pending == 0
            )
            quiet = quiet + 1 if idle else 0
        await workers.stop_all()
        return {
            (name, path): await repository.get(f"v1:private:acme::::{name}", path)
            for name, path in documents
        }
    finally:
        await client.close()


async def assert_indexes_hold_current_chunks(
    setup: ProductionRun,
    current: dict[tuple[str, str], StoredDocument | None],
    rng: random.Random,
) -> None:
    """OpenSearch and the vector directory (reopened from disk: every process's writes) hold
    exactly each document's current chunks, and nothing else; sampled vectors are those of
    the chunks' current text."""
    keyword = OpenSearchKeywordIndex(setup.opensearch_url, alias=setup.alias, replicas=0)
    vector = NumpyVectorIndex(setup.vector_dir)
    await keyword.open()
    await vector.open()
    try:
        total = 0
        for (name, path), document in current.items():
            expected = expected_chunks(document)
            total += len(expected)
            space_id = f"v1:private:acme::::{name}"
            assert await keyword.chunks_of(space_id, path) == expected, path
            assert await vector.chunks_of(space_id, path) == expected, path
        search = AsyncOpenSearch(hosts=[setup.opensearch_url])
        try:
            await search.indices.refresh(index=setup.alias)
            assert (await search.count(index=setup.alias))["count"] == total
        finally:
            await search.close()
        # The vectors are those of the chunks' current text.
        embedder = LocalOnnxEmbedder(max_length=EMBED_MAX_LENGTH, threads=1)
        try:
            alive = [d for d in current.values() if d is not None]
            for document in rng.sample(alive, 15):
                chunk = rng.choice(expected_chunks(document))
                query = await embedder.embed_query(chunk.content)
                (hit,) = await vector.search([chunk.space_id], query, limit=1)
                assert hit.chunk.chunk_id == chunk.chunk_id and hit.score > 0.999
        finally:
            embedder.close()
    finally:
        await keyword.close()
        await vector.close()


@pytest.mark.real_backend
# CI-sized: 600 operations, the SIGKILL after 300. On FerretDB's SQLite backend a busy machine
# runs them at a fraction of idle speed, so the waits below bound hangs, not speed.
@pytest.mark.timeout(900)
async def test_two_indexer_processes_converge_through_duplicates_reordering_and_sigkill(
    tmp_path: Path, real_backends: RealBackends, clean_stream: Any
) -> None:
    rng = random.Random(20261130)
    setup = ProductionRun.new(real_backends, tmp_path)
    spaces = [f"s{i}" for i in range(4)]
    documents = [(spaces[i % 4], f"notes/{i // 4:02d}/doc-{i:03d}.md") for i in range(100)]
    js = clean_stream.jetstream()
    seen: list[tuple[str, bytes]] = []

    async def capture(message: Any) -> None:
        seen.append((message.subject, message.data))

    capture_subscription = await js.subscribe("engram.docs.>", cb=capture, ordered_consumer=True)
    dead_before = await _stream_messages(js, "ENGRAM_DEADLETTER")
    storage_settings = server_settings(
        tmp_path / "storage",
        grpc_port=setup.storage_port,
        mongo_uri=setup.mongo_uri,
        mongo_db=setup.mongo_db,
        nats_url=setup.nats_url,
        jwt_secret=TEST_JWT_SECRET,
    )
    workers = Workers(setup.indexer_env(), tmp_path)
    try:
        async with storage_on_mongo(storage_settings):
            await workers.start(1)
            await workers.start(2)  # after the first created the shared directory
            # No retries: each operation is one attempt, as the operation counts assume.
            address = f"127.0.0.1:{setup.storage_port}"
            async with AsyncClient(address, token=MEMBER, retries=0) as engram:
                await write_through_chaos_and_sigkill(engram, workers, js, seen, documents, rng)
                current = await quiesce_and_read(setup, workers, js, documents)
        await capture_subscription.unsubscribe()

        assert sum(1 for d in current.values() if d is None) >= 5, "some deleted"
        assert sum(1 for d in current.values() if d is not None) >= 50, "most alive"
        await assert_indexes_hold_current_chunks(setup, current, rng)
        assert await _stream_messages(js, "ENGRAM_DEADLETTER") == dead_before
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(STREAM, setup.durable)
    finally:
        workers.kill_all()


async def _stream_messages(js: Any, stream: str) -> int:
    try:
        return int((await js.stream_info(stream)).state.messages)
    except nats.js.errors.NotFoundError:
        return 0


# --- 2. two workers in one process on tantivy and Qdrant local mode -------------------------


class SlowSource:
    """A DocumentSource whose answers arrive late (a replica with a slow link to storage)."""

    def __init__(self, source: RepositoryDocumentSource, rng: random.Random) -> None:
        self._source = source
        self._rng = rng

    async def current(self, space: SpaceRef, path: str) -> StoredDocument | None:
        document = await self._source.current(space, path)
        await asyncio.sleep(self._rng.uniform(0, 0.15))
        return document

    def documents(self, space_id: str | None = None) -> AsyncIterator[tuple[SpaceRef, str]]:
        return self._source.documents(space_id)


@dataclass
class DuplicatingFeed:
    """The outbox's events delivered to the workers' queue one to three times, each copy
    after its own random delay: duplicated and reordered."""

    rng: random.Random
    events: asyncio.Queue[DocumentEvent] = field(default_factory=asyncio.Queue)
    pending_copies: set[asyncio.Task[None]] = field(default_factory=set)

    async def deliver_later(self, event: DocumentEvent) -> None:
        await asyncio.sleep(self.rng.uniform(0, 0.05))
        self.events.put_nowait(event)

    async def fan_out(self, messages: Sequence[OutboxMessage]) -> None:
        """Each event one to three times, each copy after its own random delay."""
        for message in messages:
            event = read_event(message.payload)
            for _ in range(self.rng.randint(1, 3)):
                task = asyncio.create_task(self.deliver_later(event))
                self.pending_copies.add(task)
                task.add_done_callback(self.pending_copies.discard)


@dataclass
class WorkerPair:
    """Two `IndexWorker`s taking batches of up to eight events off one queue."""

    workers: list[IndexWorker]
    events: asyncio.Queue[DocumentEvent]
    busy: list[int] = field(default_factory=lambda: [0, 0])

    async def work(self, number: int, stop: asyncio.Event) -> None:
        worker = self.workers[number]
        while not stop.is_set():
            try:
                first = await asyncio.wait_for(self.events.get(), 0.2)
            except TimeoutError:
                continue
            batch = [first]
            while not self.events.empty() and len(batch) < 8:
                batch.append(self.events.get_nowait())
            self.busy[number] += 1
            try:
                groups = coalesce(batch)
                results = await worker.index_many(
                    (group[0].space, path) for (_, path), group in groups.items()
                )
                assert all(error is None for error in results.values()), results
            finally:
                self.busy[number] -= 1


async def local_indexes(
    tmp_path: Path, stack: contextlib.AsyncExitStack
) -> tuple[TantivyKeywordIndex, QdrantVectorIndex]:
    """tantivy and Qdrant local mode, closed with `stack`."""
    keyword = TantivyKeywordIndex(tmp_path / "keyword")
    await keyword.open()
    stack.push_async_callback(keyword.close)
    vector = QdrantVectorIndex(AsyncQdrantClient(path=str(tmp_path / "qdrant")))
    await vector.open()
    stack.push_async_callback(vector.close)
    return keyword, vector


async def burst_writer(core: Any, documents: list[tuple[SpaceRef, str]], seed: int) -> None:
    """100 operations in bursts of three on one document, 20-150 ms apart: the
    next change tends to land while a worker is between reading and writing."""
    local = random.Random(seed)
    for _ in range(34):
        ref, path = local.choice(documents)
        for _ in range(3):
            dice = local.random()
            if dice < 0.5:
                await core.storage.write(
                    LOCAL_ADMIN,
                    ref,
                    path,
                    sentence(local, 2, 12) + "\n",
                    mode=WriteMode.APPEND,
                )
            elif dice < 0.8:
                await core.storage.write(LOCAL_ADMIN, ref, path, body(local))
            else:
                with contextlib.suppress(DocumentNotFound):
                    await core.storage.delete(LOCAL_ADMIN, ref, path)
            await asyncio.sleep(local.uniform(0.02, 0.1))


@pytest.mark.timeout(120)
async def test_two_workers_converge_on_tantivy_and_qdrant_with_duplicated_reordered_events(
    tmp_path: Path,
) -> None:
    rng = random.Random(1130)
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(server_settings(tmp_path / "core"), stack)
        feed = DuplicatingFeed(rng)
        core.publisher.subscribe(feed.fan_out)
        keyword, vector = await local_indexes(tmp_path, stack)
        model = LocalOnnxEmbedder(max_length=EMBED_MAX_LENGTH)
        stack.callback(model.close)
        embedder = CachedEmbedder(model, SqliteEmbeddingCache(core.database))
        source = RepositoryDocumentSource(core.repository)
        workers = []
        # Replicas behind a slow link to storage: what one reads is up to 200 ms old when
        # it writes, so it often writes a state the other already replaced - its re-read
        # after writing must notice and write again.
        for reader in (SlowSource(source, random.Random(3)), SlowSource(source, random.Random(4))):
            models = IndexModels(vector, embedder)
            await models.open()
            workers.append(IndexWorker(reader, keyword, vector, models, concurrency=4))
        pair = WorkerPair(workers, feed.events)

        repasses_before = REGISTRY.get_sample_value("engram_indexer_repasses_total") or 0.0
        stop = asyncio.Event()
        runners = [asyncio.create_task(pair.work(n, stop)) for n in range(2)]
        core.relay.start()
        stack.push_async_callback(core.relay.stop)
        spaces = [parse_space_id(f"v1:private:local::::q{i}") for i in range(2)]
        documents = [(spaces[i % 2], f"d{i:02d}.md") for i in range(30)]

        await asyncio.gather(*(burst_writer(core, documents, seed) for seed in range(3)))
        assert await core.relay.drained(30)
        for _ in range(400):  # copies still on their way, then the workers finishing
            if not feed.pending_copies and feed.events.empty() and pair.busy == [0, 0]:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*runners)

        alive = 0
        for ref, path in documents:
            document = await core.repository.get(ref.id, path)
            alive += document is not None
            expected = expected_chunks(document)
            assert await keyword.chunks_of(ref.id, path) == expected, path
            assert await vector.chunks_of(ref.id, path) == expected, path
        assert 5 <= alive < len(documents)
        repasses = (REGISTRY.get_sample_value("engram_indexer_repasses_total") or 0.0) - (
            repasses_before
        )
        assert repasses > 0, "the schedule never made a worker write a superseded state"
