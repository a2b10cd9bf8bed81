"""MongoDocumentRepository when a writer dies between committing a revision and updating
its head: readers still see the revision, and the relay rolls the head (listings) forward."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from engram.backends.mongo import MongoDatabase, connect
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage import mongo_repository
from engram.storage.mongo.outbox import MongoOutbox
from engram.storage.mongo_repository import MongoDocumentRepository, revision_id
from tests.support.backends import RealBackends

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]

SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")


@pytest.fixture
async def database(real_backends: RealBackends) -> AsyncIterator[MongoDatabase]:
    client, db = connect(real_backends.url("mongo"), f"crash_{uuid.uuid4().hex[:10]}")
    yield db
    await client.close()


async def test_a_lost_head_update_is_repaired(database: MongoDatabase) -> None:
    repository = MongoDocumentRepository(database, retention=5)
    await repository.ensure_indexes()
    at = datetime.now(UTC).replace(microsecond=0)
    # The writer committed revision 1 (pointer + revision) and died before its head update.
    revision = {
        "_id": revision_id(SPACE.id, "a.md", 1),
        "space_id": SPACE.id,
        "path": "a.md",
        "rev": 1,
        "op": "upsert",
        "document_id": "d1",
        "version": 1,
        "content": "hello",
        "sha256": "x" * 64,
        "size_bytes": 5,
        "word_count": 1,
        "created_at": at,
        "at": at,
        "by": "ann",
        "event_id": "e1",
    }
    await database["outbox"].insert_one(
        {"_id": "e1", "revision": revision["_id"], "at": at - timedelta(seconds=30)}
    )
    await database["revisions"].insert_one(revision)
    listed = await repository.list_paths(SPACE.id, directory="", start="", inclusive=True, limit=10)
    assert listed == [], "no head yet"
    outbox = MongoOutbox(repository)
    messages = await outbox.pending(10)
    assert [m.event_id for m in messages] == ["e1"]
    listed = await repository.list_paths(SPACE.id, directory="", start="", inclusive=True, limit=10)
    assert [entry.path for entry in listed] == ["a.md"], "the relay rolled the head forward"


async def test_reads_see_a_revision_beyond_the_head(database: MongoDatabase) -> None:
    repository = MongoDocumentRepository(database, retention=5)
    at = datetime.now(UTC).replace(microsecond=0)
    revision = {
        "_id": revision_id(SPACE.id, "b.md", 1),
        "space_id": SPACE.id,
        "path": "b.md",
        "rev": 1,
        "op": "upsert",
        "document_id": "d2",
        "version": 1,
        "content": "fresh",
        "sha256": "y" * 64,
        "size_bytes": 5,
        "word_count": 1,
        "created_at": at,
        "at": at,
        "by": "ann",
        "event_id": "e2",
    }
    await database["revisions"].insert_one(revision)
    document = await repository.get(SPACE.id, "b.md")
    assert document is not None and document.content == "fresh"
    assert mongo_repository.HEAD_GRACE < mongo_repository.ABANDONED_POINTER
