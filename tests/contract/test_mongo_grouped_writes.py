"""Concurrent callers' writes share one command (backends/mongo_batch.py), and each caller
still learns its own outcome, on the real server: FerretDB stops a multi-statement update
at its first failing statement and names the wrong one, so a group with a failure must
still land every other caller's replace, and fail the one that collided."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, connect
from engram.backends.mongo_batch import GroupedReplaces, GroupedWrites
from tests.support.backends import RealBackends

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]


@pytest.fixture
async def database(real_backends: RealBackends) -> AsyncIterator[MongoDatabase]:
    client, database = connect(real_backends.url("mongo"), f"engram_test_{uuid.uuid4().hex[:12]}")
    try:
        yield database
    finally:
        await client.drop_database(database.name)
        await client.close()


def guarded(key: str, rev: int) -> tuple[dict[str, object], dict[str, object]]:
    """A head's replace: applies only over an older revision's head."""
    return {"_id": key, "rev": {"$lt": rev}}, {"rev": rev, "note": f"{key}@{rev}"}


async def test_a_collision_in_a_group_fails_its_caller_alone(database: MongoDatabase) -> None:
    heads = database["heads"]
    await heads.insert_many([{"_id": f"h{i}", "rev": 1} for i in range(12)])
    await heads.insert_one({"_id": "newer", "rev": 9})
    replaces = GroupedReplaces(heads)
    # Queued together, they share one command, with the colliding replace (an older
    # revision than the head in place) in the middle.
    calls = [guarded(f"h{i}", 2) for i in range(6)]
    calls += [guarded("newer", 5)]
    calls += [guarded(f"h{i}", 2) for i in range(6, 12)]
    calls += [guarded("fresh", 1)]
    outcomes = await asyncio.gather(
        *(replaces.replace(q, u) for q, u in calls), return_exceptions=True
    )
    # A replace that landed before the failing statement is sent again and finds itself in
    # place: DuplicateKeyError, "this or a newer one is in place", as for the loser.
    assert isinstance(outcomes[6], DuplicateKeyError)
    assert all(o is None or isinstance(o, DuplicateKeyError) for o in outcomes)
    assert outcomes[7:] == [None] * 7, "a replace after the collision did not land"
    stored = {doc["_id"]: doc["rev"] async for doc in heads.find({})}
    assert stored == {**{f"h{i}": 2 for i in range(12)}, "newer": 9, "fresh": 1}


async def test_a_replace_sent_twice_keeps_its_result(database: MongoDatabase) -> None:
    heads = database["heads"]
    replaces = GroupedReplaces(heads)
    await replaces.replace(*guarded("h", 3))
    with pytest.raises(DuplicateKeyError):
        await replaces.replace(*guarded("h", 3))  # the same head is already in place
    assert await heads.find_one({"_id": "h"}) == {"_id": "h", "rev": 3, "note": "h@3"}


async def test_grouped_inserts_fail_only_the_taken_id(database: MongoDatabase) -> None:
    revisions = database["revisions"]
    await revisions.insert_one({"_id": "taken"})
    inserts = GroupedWrites(revisions)
    ids = [f"r{i}" for i in range(5)] + ["taken"] + [f"r{i}" for i in range(5, 10)]
    outcomes = await asyncio.gather(
        *(inserts.insert({"_id": key}) for key in ids), return_exceptions=True
    )
    assert [ids[i] for i, o in enumerate(outcomes) if isinstance(o, Exception)] == ["taken"]
    assert isinstance(outcomes[5], DuplicateKeyError)
    assert await revisions.count_documents({}) == 11
