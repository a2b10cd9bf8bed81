"""The embedding backfill on the production indexing path: documents on FerretDB, the
indexer fed by NATS JetStream writing OpenSearch and Qdrant (local mode); the job's
re-queued documents travel JetStream like any reindex and the indexes converge."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta

import pytest

from engram.app.parts import Indexing
from engram.app.production import open_indexer, storage_on_mongo
from engram.backends.mongo import connect
from engram.domain.chunks import Chunk
from engram.domain.maintenance import SpaceSettings
from engram.domain.spaces import parse_space_id
from engram.events.jetstream import STREAM, JetStreamPublisher
from engram.indexer.jetstream_consumer import JetStreamReindexQueue
from engram.maintenance.hygiene import EmbeddingBackfillJob
from engram.maintenance.ports import MaintenanceDeps
from engram.storage.service import utc_now
from tests.e2e.test_indexer_jetstream import (  # the same deployment as the indexer's suite
    SPACE_ID,
    Deployment,
    converged,
    deployment,
    engram_client,
    eventually,
    expected_chunks,
)
from tests.support.maintenance import mongo_deps

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

__all__ = ["deployment"]

SPACE = parse_space_id(SPACE_ID)


@contextlib.asynccontextmanager
async def production_deps(
    deployment: Deployment, indexing: Indexing, *, clock: Callable[[], datetime] = utc_now
) -> AsyncIterator[MaintenanceDeps]:
    """What `engram serve maintenance` builds, on the deployment's backends and the
    indexer's own index adapters."""
    client, database = connect(deployment.common["mongo_uri"], deployment.common["mongo_db"])
    publisher = JetStreamPublisher(deployment.common["nats_url"], name="engram-maintenance")
    try:
        yield mongo_deps(
            database,
            deployment.storage_settings(),
            reindex=JetStreamReindexQueue(
                publisher, durable=deployment.indexer_settings.indexer_durable
            ),
            keyword=indexing.keyword,
            vector=indexing.vector,
            clock=clock,
        )
    finally:
        await publisher.close()
        await client.close()


async def test_backfill_requeues_index_gaps_through_jetstream(deployment: Deployment) -> None:
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        open_indexer(deployment.indexer_settings) as indexer,
        engram_client(storage_server.port) as storage,
        engram_client(indexer.server.port) as status,
        # The walk runs a minute later: a document written in the last 30 s is late (its
        # event may still be on its way to JetStream), not missing.
        production_deps(
            deployment, indexer.indexing, clock=lambda: utc_now() + timedelta(minutes=1)
        ) as deps,
    ):
        for path in ("a.md", "b.md", "c.md"):
            body = "".join(
                f"{path} entry {i}: deployed billing, noted retries.\n" for i in range(20)
            )
            await storage.write_document(path, body)
        for path in ("a.md", "b.md", "c.md"):
            await eventually(lambda p=path: converged(deployment, status, p), 60, f"{path} indexed")
        job = EmbeddingBackfillJob(deps, timedelta(hours=24))
        assert (await job.run(SPACE, SpaceSettings())).counts["documents_requeued"] == 0

        # The OpenSearch index is lost (deleted, then created again empty), and Qdrant lost
        # b.md's vectors. (Deleting single chunks would not do: OpenSearch remembers a
        # deleted chunk's version for index.gc_deletes, 60 s, and refuses the same version.)
        await deployment.lose_keyword_index()
        await deps.vector.delete_chunks(SPACE_ID, "b.md")

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": 3,
            "documents_requeued": 3,
            "documents_pending": 0,
        }
        assert any(
            line.startswith("b.md: missing from the keyword index") for line in report.details
        )
        for path in ("a.md", "b.md", "c.md"):
            await eventually(lambda p=path: converged(deployment, status, p), 60, f"{path} back")
            expected = await expected_chunks(deployment, path)
            assert await deps.vector.chunks_of(SPACE_ID, path) == expected
        again = await job.run(SPACE, SpaceSettings())
        assert again.counts == {
            "documents_checked": 3,
            "documents_requeued": 0,
            "documents_pending": 0,
        }


async def test_backfill_leaves_what_jetstream_still_holds_for_the_indexer(
    deployment: Deployment,
) -> None:
    """A bulk load the indexer has not got through (its keyword writes held back) is left
    to its own events: backfill re-queues none of it, and each document is indexed once."""
    paths = [f"bulk/{i:04d}.md" for i in range(200)]
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        open_indexer(deployment.indexer_settings) as indexer,
        engram_client(storage_server.port) as storage,
        engram_client(indexer.server.port) as status,
        production_deps(deployment, indexer.indexing) as deps,
    ):
        keyword = indexer.indexing.keyword
        replace_chunks = keyword.replace_chunks
        held = asyncio.Event()
        writes: dict[str, int] = {}

        async def held_back(space_id: str, path: str, chunks: Sequence[Chunk]) -> None:
            await held.wait()
            writes[path] = writes.get(path, 0) + 1
            await replace_chunks(space_id, path, chunks)

        keyword.replace_chunks = held_back  # type: ignore[method-assign]
        for path in paths:
            await storage.write_document(path, "A short note about the deploy.")

        async def all_in_the_stream() -> bool:
            js = await probe.jetstream()
            info = await js.consumer_info(STREAM, deployment.indexer_settings.indexer_durable)
            return (info.num_pending or 0) + (info.num_ack_pending or 0) == len(paths)

        probe = JetStreamPublisher(deployment.common["nats_url"], name="backfill-test-probe")
        try:
            await eventually(all_in_the_stream, 60, "every change event in JetStream")
        finally:
            await probe.close()
        job = EmbeddingBackfillJob(deps, timedelta(hours=24))

        report = await job.run(SPACE, SpaceSettings())

        assert report.counts == {
            "documents_checked": len(paths),
            "documents_requeued": 0,
            "documents_pending": len(paths),
        }
        held.set()

        async def all_written() -> bool:
            return len(writes) == len(paths)

        await eventually(all_written, 120, "every document indexed")
        # Quiescent: the backlog is empty and the last document's chunks are all there.
        await eventually(lambda: converged(deployment, status, paths[-1]), 60, "backlog empty")
        assert writes == dict.fromkeys(paths, 1)
