"""MongoOutbox fed from memory on FerretDB: a change committed through the repository is
pending without a query of the outbox or revisions collections, its pointer stays in the
collection until cleared, published pointers are deleted together and never published
twice meanwhile, and what memory never held (another process's pointer, an erasure's event)
is still found in the collection."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from engram.backends.mongo import MongoDatabase
from engram.domain.documents import DocumentWrite, Erasure
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage.mongo.outbox import CLEAR_EVERY_SECONDS, OUTBOX_POLL_SECONDS, MongoOutbox
from engram.storage.mongo_repository import MongoDocumentRepository
from tests.support.backends import RealBackends

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]

SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")


class Commands(monitoring.CommandListener):
    """Counts the commands sent, by (command, collection)."""

    def __init__(self) -> None:
        self.sent: Counter[tuple[str, str]] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self.sent[(event.command_name, target if isinstance(target, str) else "")] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def watched(real_backends: RealBackends) -> AsyncIterator[tuple[MongoDatabase, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        real_backends.url("mongo"), event_listeners=[commands], tz_aware=True
    )
    database = client[f"outbox_{uuid.uuid4().hex[:10]}"]
    yield database, commands
    await client.drop_database(database.name)
    await client.close()


def write(path: str, content: str, *, version: int = 0, document_id: str = "") -> DocumentWrite:
    data = content.encode()
    return DocumentWrite(
        space=SPACE,
        path=path,
        content=content,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        word_count=len(content.split()),
        expected_version=version,
        document_id=document_id or uuid.uuid4().hex,
        at=datetime.now(UTC),
        by="ann",
        event_id=uuid.uuid4().hex,
    )


async def clocked_outbox(
    database: MongoDatabase,
) -> tuple[list[float], MongoDocumentRepository, MongoOutbox]:
    """A repository and its outbox on a clock the test moves (`clock[0]`), after the
    outbox's first read of the collection."""
    clock = [0.0]
    repository = MongoDocumentRepository(database, retention=5)
    await repository.ensure_indexes()
    outbox = MongoOutbox(repository, clock=lambda: clock[0])
    await outbox.pending(10)
    return clock, repository, outbox


async def test_committed_changes_are_pending_from_memory(
    watched: tuple[MongoDatabase, Commands],
) -> None:
    database, commands = watched
    repository = MongoDocumentRepository(database, retention=5)
    await repository.ensure_indexes()
    outbox = MongoOutbox(repository)
    assert await outbox.pending(10) == [], "nothing yet (the collection was read)"
    first = write("a.md", "one")
    stored = await repository.save(first)
    second = write("a.md", "two", version=1, document_id=stored.document_id)
    await repository.save(second)
    commands.sent.clear()
    messages = await outbox.pending(10)
    assert [m.event_id for m in messages] == [first.event_id, second.event_id]
    assert commands.sent == Counter(), "served from memory, no query"
    assert await outbox.backlog() == 2, "the pointers stay until the events are cleared"
    await outbox.clear(messages)
    assert await outbox.backlog() == 0
    assert await outbox.pending(10) == []


async def test_what_memory_never_held_is_found_in_the_collection(
    watched: tuple[MongoDatabase, Commands],
) -> None:
    database, commands = watched
    repository = MongoDocumentRepository(database, retention=5)
    await repository.ensure_indexes()
    outbox = MongoOutbox(repository)
    await outbox.pending(10)  # the first read of the collection
    # Another process (its own repository, no relay here) commits a change.
    elsewhere = write("b.md", "theirs")
    await MongoDocumentRepository(database, retention=5).save(elsewhere)
    # Ours commits one, then erases a document: the erasure's event waits in the collection.
    mine = write("c.md", "ours")
    await repository.save(mine)
    purged = write("d.md", "gone")
    await repository.save(purged)
    erasure = Erasure(
        space=SPACE, path="d.md", at=datetime.now(UTC), by="ann", event_id=uuid.uuid4().hex
    )
    await repository.erase(erasure)
    commands.sent.clear()
    messages = await outbox.pending(10)
    ids = [m.event_id for m in messages]
    assert ids[:2] == [mine.event_id, purged.event_id], "memory first"
    assert sorted(ids[2:]) == sorted([elsewhere.event_id, erasure.event_id])
    assert commands.sent[("find", "outbox")] == 1, "the collection was read once"
    assert len(ids) == len(set(ids)), "nothing twice"
    await outbox.clear(messages)
    assert await outbox.backlog() == 0


async def test_the_periodic_read_under_load_leaves_young_pointers_to_their_writers(
    watched: tuple[MongoDatabase, Commands],
) -> None:
    database, _ = watched
    clock, repository, outbox = await clocked_outbox(database)
    other = MongoDocumentRepository(database, retention=5)
    young = write("young.md", "still committing elsewhere")
    await other.save(young)
    old = write("old.md", "left by a crashed writer")
    await other.save(old)
    await database["outbox"].update_one(
        {"_id": old.event_id}, {"$set": {"at": datetime.now(UTC) - timedelta(seconds=30)}}
    )
    mine = write("mine.md", "ours")
    await repository.save(mine)
    clock[0] += OUTBOX_POLL_SECONDS
    messages = await outbox.pending(10)
    assert [m.event_id for m in messages] == [mine.event_id, old.event_id]
    await outbox.clear(messages)
    # Nothing left in memory: the collection is read, and the young pointer is still left
    # to its writer until it is IN_FLIGHT old (its writer died, say).
    assert await outbox.pending(10) == []
    await database["outbox"].update_one(
        {"_id": young.event_id}, {"$set": {"at": datetime.now(UTC) - timedelta(seconds=30)}}
    )
    assert [m.event_id for m in await outbox.pending(10)] == [young.event_id]


async def test_published_pointers_are_deleted_together_and_not_published_again(
    watched: tuple[MongoDatabase, Commands],
) -> None:
    database, commands = watched
    clock, repository, outbox = await clocked_outbox(database)
    writes = [write(f"{name}.md", name) for name in ("a", "b", "c")]
    for change in writes:
        await repository.save(change)
    commands.sent.clear()
    # The relay publishes and clears one batch at a time.
    for message in await outbox.pending(10):
        await outbox.clear([message])
    assert commands.sent[("delete", "outbox")] == 0, "no delete per batch"
    # Memory is empty, so the collection is read: the published pointers still in it are
    # not handed out again.
    assert await outbox.pending(10) == []
    assert commands.sent[("find", "outbox")] == 1
    clock[0] += CLEAR_EVERY_SECONDS
    assert await outbox.pending(10) == []
    assert commands.sent[("delete", "outbox")] == 1, "one delete for the three"
    assert await database["outbox"].count_documents({}) == 0
