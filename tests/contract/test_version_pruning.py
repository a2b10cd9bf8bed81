"""`prune_versions` on both repositories (SQLite and MongoDB on FerretDB): versions kept
under a larger retention are erased down to the current one, for live and deleted
documents, and a second pass erases nothing."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.documents import DocumentDeletion, DocumentWrite
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.ports import DocumentRepository
from engram.storage.sqlite_repository import SCHEMA, SqliteDocumentRepository
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract

SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")
OTHER = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="other")

# A repository on the same store with the given retention.
Reopen = Callable[[int], DocumentRepository]


class Store:
    def __init__(self, reopen: Reopen, raw_versions: Callable[[str], Any]) -> None:
        self.reopen = reopen
        # How many stored version records of SPACE hold `marker`, read from the raw store.
        self.raw_versions = raw_versions


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=pytest.mark.real_backend)])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "engram.sqlite3")
        await database.open([SCHEMA])

        async def sqlite_raw(marker: str) -> int:
            def count(connection: sqlite3.Connection) -> int:
                row = connection.execute(
                    "SELECT COUNT(*) FROM document_versions "
                    "WHERE space_id = ? AND instr(content, ?) > 0",
                    (SPACE.id, marker),
                ).fetchone()
                return int(row[0])

            return await database.read(count)

        yield Store(
            lambda retention: SqliteDocumentRepository(database, retention=retention), sqlite_raw
        )
        await database.close()
        return
    client, db = connect(real_backends.url("mongo"), f"prune_{uuid.uuid4().hex[:10]}")

    async def mongo_raw(marker: str) -> int:
        # Revisions other than each path's newest: the kept versions (and tombstones).
        space = {"space_id": SPACE.id}
        revisions = await db["revisions"].find(space, projection={"content": 1}).to_list(None)
        heads = await db["documents"].find(space, projection={"rev": 1, "path": 1}).to_list(None)
        newest = {f"{SPACE.id}\n{h['path']}\n{int(h['rev']):012d}" for h in heads}
        return sum(
            1 for r in revisions if r["_id"] not in newest and marker in r.get("content", "")
        )

    yield Store(lambda retention: MongoDocumentRepository(db, retention=retention), mongo_raw)
    await client.drop_database(db.name)
    await client.close()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def write(repository: DocumentRepository, space: SpaceRef, path: str, count: int) -> None:
    """Writes `count` versions of the document ("<path> v1" ... "<path> vN")."""
    current = await repository.get(space.id, path)
    for n in range(1, count + 1):
        content = f"{path} v{n} pruning-marker"
        version = current.version if current else 0
        current = await repository.save(
            DocumentWrite(
                space=space,
                path=path,
                content=content,
                sha256=sha(content),
                size_bytes=len(content),
                word_count=3,
                expected_version=version,
                document_id=current.document_id if current else uuid.uuid4().hex,
                at=datetime.now(UTC).replace(microsecond=0),
                by="ann",
                event_id=uuid.uuid4().hex,
            )
        )


async def publish_all(repository: DocumentRepository) -> None:
    """What the outbox relay does after publishing (MongoDB keeps a revision whose event is
    unpublished: it carries the event's payload)."""
    if isinstance(repository, MongoDocumentRepository):
        pending = await repository.pending_revisions(10_000)
        await repository.clear_events([event_id for event_id, _ in pending])


async def kept(repository: DocumentRepository, space: SpaceRef, path: str) -> list[int]:
    versions = await repository.list_versions(space.id, path, before_seq=None, limit=100)
    return [v.version for v in versions]


async def test_pruning_erases_versions_beyond_a_lowered_retention(store: Store) -> None:
    generous = store.reopen(5)
    await write(generous, SPACE, "a.md", 9)
    await write(generous, SPACE, "b.md", 2)
    await write(generous, SPACE, "gone.md", 8)
    gone = await generous.get(SPACE.id, "gone.md")
    assert gone is not None
    await generous.delete(
        DocumentDeletion(
            space=SPACE,
            path="gone.md",
            expected_version=gone.version,
            document_id=gone.document_id,
            sha256=gone.sha256,
            size_bytes=gone.size_bytes,
            at=datetime.now(UTC).replace(microsecond=0),
            by="ann",
            event_id=uuid.uuid4().hex,
        )
    )
    await write(generous, OTHER, "a.md", 9)
    await publish_all(generous)
    assert await kept(generous, SPACE, "a.md") == [8, 7, 6, 5, 4]
    before = await store.raw_versions("a.md v")

    strict = store.reopen(2)
    pruned = await strict.prune_versions(SPACE.id)

    assert await kept(strict, SPACE, "a.md") == [8, 7]
    assert await kept(strict, SPACE, "b.md") == [1], "within the retention: untouched"
    assert (await strict.get(SPACE.id, "a.md")).content == "a.md v9 pruning-marker"  # type: ignore[union-attr]
    assert await strict.get_version(SPACE.id, "a.md", 6) is None
    # The raw store holds no erased version's content.
    assert await store.raw_versions("a.md v6") == 0
    assert await store.raw_versions("a.md v8") == 1
    assert before > await store.raw_versions("a.md v")
    # Another space is not pruned (read with the retention it was written under).
    assert await kept(store.reopen(5), OTHER, "a.md") == [8, 7, 6, 5, 4]
    # At least three each of a.md and the deleted gone.md; on MongoDB also the revisions
    # the write path could not prune because their events were still unpublished then.
    assert pruned >= 3 + 3
    assert await strict.prune_versions(SPACE.id) == 0, "a second pass erases nothing"


async def test_pruning_to_zero_keeps_only_current_documents(store: Store) -> None:
    generous = store.reopen(3)
    await write(generous, SPACE, "a.md", 4)
    await publish_all(generous)
    none = store.reopen(0)
    assert await none.prune_versions(SPACE.id) > 0
    assert await store.raw_versions("a.md v") == 0
    assert (await none.get(SPACE.id, "a.md")).version == 4  # type: ignore[union-attr]
    assert await none.prune_versions(SPACE.id) == 0
