"""PurgeDocument and DeleteSpace reach the indexes: in `engram dev` (tantivy and the embedded
vector index, fed by the outbox) and in production (storage on FerretDB publishing to NATS
JetStream, `engram serve indexer` writing OpenSearch and Qdrant). After the erasure no chunk
of the content is left in either index, search finds nothing of it, and neither do the raw
SQLite files or MongoDB collections; other spaces keep theirs."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.app.production import open_indexer, storage_on_mongo
from engram.backends.mongo import connect
from engram.client import AsyncClient, Space
from engram.indexes.ports import KeywordIndex, VectorIndex
from tests.e2e.test_indexer_jetstream import STREAM, Deployment, eventually
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import mint

pytestmark = pytest.mark.e2e

LOCAL_NOTES = "v1:private:local::::notes"
LOCAL_KEEP = "v1:private:local::::keep"
KEEP_SPACE = Space(name="keep")


def body(secret: str, n: int) -> str:
    return "".join(
        f"Entry {i}: the launch code word is {secret}; the agent wrote it down in notes.\n"
        for i in range(n)
    )


def sqlite_files_text(root: Path) -> str:
    """Every value of every table of every SQLite file under `root`."""
    parts: list[str] = []
    for path in root.rglob("*"):
        if not path.is_file() or path.suffix not in (".db", ".sqlite", ".sqlite3"):
            continue
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                r[0]
                for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for table in tables:
                for row in connection.execute(f'SELECT * FROM "{table}"'):
                    parts.extend(
                        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                        for v in row
                    )
        finally:
            connection.close()
    return "\n".join(parts)


async def held(
    keyword: KeywordIndex, vector: VectorIndex, space_id: str, path: str
) -> tuple[int, int]:
    return (
        len(await keyword.chunks_of(space_id, path)),
        len(await vector.chunks_of(space_id, path)),
    )


# --- engram dev --------------------------------------------------------------------------------


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedEngram, AsyncClient]]:
    async with (
        embedded_engram(server_settings(tmp_path / "engram")) as engram,
        AsyncClient(f"127.0.0.1:{engram.port}", space=Space(name="notes")) as client,
    ):
        yield engram, client


async def search_hits(client: AsyncClient, secret: str, *names: str) -> list[str]:
    response = await client.search(secret, spaces=[Space(name=n) for n in names], limit=50)
    return [hit.content for hit in response.results]


async def test_dev_purge_and_delete_space_empty_both_indexes(
    dev: tuple[EmbeddedEngram, AsyncClient],
) -> None:
    engram, storage = dev
    keyword, vector = engram.indexing.keyword, engram.indexing.vector
    secret, kept = f"zx{uuid.uuid4().hex[:12]}", f"kq{uuid.uuid4().hex[:12]}"
    await storage.write_document("a.md", body(secret, 30))
    await storage.write_document("a.md", body(secret, 40))
    await storage.write_document("b.md", body(secret, 5))
    await storage.write_document("dir/c.md", body(secret, 5))
    await storage.write_document("k.md", body(kept, 5), space=KEEP_SPACE)
    assert await engram.relay.drained(60)
    assert all(n > 0 for n in await held(keyword, vector, LOCAL_NOTES, "a.md"))
    assert any(secret in hit for hit in await search_hits(storage, secret, "notes"))

    purged = await storage.purge_document("a.md")
    assert purged.purged and purged.versions_erased == 1
    assert await engram.relay.drained(60)
    assert await held(keyword, vector, LOCAL_NOTES, "a.md") == (0, 0)
    assert await held(keyword, vector, LOCAL_NOTES, "b.md") != (0, 0), "only a.md was purged"

    deleted = await storage.delete_space(confirm_space_id=LOCAL_NOTES)
    assert deleted.documents_erased == 2
    assert await engram.relay.drained(60)
    for path in ("a.md", "b.md", "dir/c.md"):
        assert await held(keyword, vector, LOCAL_NOTES, path) == (0, 0), path
    assert not any(secret in hit for hit in await search_hits(storage, secret, "notes", "keep"))
    assert all(n > 0 for n in await held(keyword, vector, LOCAL_KEEP, "k.md"))
    assert any(kept in hit for hit in await search_hits(storage, kept, "keep"))
    raw = await asyncio.to_thread(sqlite_files_text, engram.settings.data_dir)
    assert secret not in raw and kept in raw

    # A document written into the space after its deletion is indexed as usual.
    await storage.write_document("new.md", body("after", 3))
    assert await engram.relay.drained(60)
    assert all(n > 0 for n in await held(keyword, vector, LOCAL_NOTES, "new.md"))


# --- production: FerretDB, NATS JetStream, OpenSearch, Qdrant -------------------------------

ADMIN = mint("root", "acme", "admin")
MEMBER = mint("ann", "acme", "member")
NOTES = "v1:private:acme::::notes"
KEEP = "v1:private:acme::::keep"


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    deployment = Deployment(tmp_path, real_backends)
    client = await nats.connect(deployment.common["nats_url"])
    try:
        yield deployment
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await client.jetstream().delete_consumer(
                STREAM, deployment.indexer_settings.indexer_durable
            )
    finally:
        await client.close()


async def mongo_text(deployment: Deployment) -> str:
    client, database = connect(deployment.common["mongo_uri"], deployment.common["mongo_db"])
    try:
        parts: list[str] = []
        for collection in await database.list_collection_names():
            async for document in database[collection].find({}):
                parts.append(repr(document))
        return "\n".join(parts)
    finally:
        await client.close()


@pytest.mark.real_backend
@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
async def test_production_purge_and_delete_space_empty_opensearch_and_qdrant(
    deployment: Deployment,
) -> None:
    secret, kept = f"zx{uuid.uuid4().hex[:12]}", f"kq{uuid.uuid4().hex[:12]}"
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        open_indexer(deployment.indexer_settings) as indexer,
        AsyncClient(
            f"127.0.0.1:{storage_server.port}", token=MEMBER, space=Space(name="notes")
        ) as storage,
    ):
        admin = storage.as_caller(ADMIN)
        keyword: Any = indexer.indexing.keyword
        vector: VectorIndex = indexer.indexing.vector

        async def indexed(space_id: str, path: str) -> bool:
            return all(n > 0 for n in await held(keyword, vector, space_id, path))

        async def gone(space_id: str, path: str) -> bool:
            return await held(keyword, vector, space_id, path) == (0, 0)

        await storage.write_document("a.md", body(secret, 30))
        await storage.write_document("a.md", body(secret, 40))
        await storage.write_document("b.md", body(secret, 5))
        await storage.write_document("k.md", body(kept, 5), space=KEEP_SPACE)
        for space_id, path in ((NOTES, "a.md"), (NOTES, "b.md"), (KEEP, "k.md")):
            await eventually(lambda s=space_id, p=path: indexed(s, p), 240, f"{path} indexed")
        assert secret in await mongo_text(deployment)

        purged = await admin.purge_document("a.md")
        assert purged.purged and purged.versions_erased == 1
        await eventually(lambda: gone(NOTES, "a.md"), 60, "a.md's chunks gone")
        assert await indexed(NOTES, "b.md")

        deleted = await admin.delete_space(confirm_space_id=NOTES)
        assert deleted.documents_erased == 1 and deleted.refunded_bytes == len(body(secret, 5))
        await eventually(lambda: gone(NOTES, "b.md"), 60, "the space's chunks gone")
        assert await keyword.search([NOTES, KEEP], secret, limit=20) == []
        assert await indexed(KEEP, "k.md")
        assert [hit.chunk.path for hit in await keyword.search([KEEP], kept, limit=5)]
        raw = await mongo_text(deployment)
        assert secret not in raw and kept in raw
