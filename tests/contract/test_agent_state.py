"""The SOUL.md baseline store, on SQLite and on FerretDB: a swap returns the previous baseline,
and racing swaps form one history, so each change is seen by exactly one assembly."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.workspace.agent_state import (
    SCHEMA,
    AgentStateStore,
    MongoAgentState,
    SqliteAgentState,
)
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract


@pytest.fixture(params=["sqlite", "mongo"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[AgentStateStore]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "agents.db")
        await database.open([SCHEMA])
        yield SqliteAgentState(database)
        await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    client, mongo = connect(real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}")
    state = MongoAgentState(mongo)
    await state.ensure_indexes()
    await state.ensure_indexes()  # idempotent
    yield state
    await client.drop_database(mongo.name)
    await client.close()


async def test_a_swap_returns_the_previous_baseline(store: AgentStateStore) -> None:
    assert await store.swap_soul("acme/ann/s1", "a" * 64) is None, "first assembly: none"
    assert await store.swap_soul("acme/ann/s1", "a" * 64) == "a" * 64
    assert await store.swap_soul("acme/ann/s1", "b" * 64) == "a" * 64
    assert await store.swap_soul("acme/ann/s1", "") == "b" * 64, "SOUL.md deleted"
    assert await store.swap_soul("acme/ann/s1", "") == ""
    assert await store.swap_soul("acme/bob/s1", "c" * 64) is None, "each agent has its own"
    assert await store.swap_soul("acme/ann/s1#0", "d" * 64) is None, "keys never collide"
    assert await store.swap_soul("acme/ann/s1", "b" * 64) == ""


async def test_racing_swaps_of_one_change_see_it_exactly_once(store: AgentStateStore) -> None:
    await store.swap_soul("acme/ann/s1", "old")
    seen = await asyncio.gather(*(store.swap_soul("acme/ann/s1", "new") for _ in range(12)))
    assert Counter(seen) == {"old": 1, "new": 11}, "one notice, however many replicas race"


async def test_racing_swaps_of_different_values_form_one_history(store: AgentStateStore) -> None:
    """Each value a racer stores is returned as `previous` to at most one later swap: no
    lost update (a value nobody saw replaced) and no change reported twice."""
    await store.swap_soul("acme/ann/s1", "v0")
    values = [f"v{n}" for n in range(1, 13)]
    previous = await asyncio.gather(*(store.swap_soul("acme/ann/s1", v) for v in values))
    final = await store.swap_soul("acme/ann/s1", "v0")
    assert sorted([*previous, final]) == sorted(["v0", *values])
