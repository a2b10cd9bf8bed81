"""Workspace write limits per agent, over the rate-limit stores (SQLite and FerretDB): the
sliding minute and hour windows (never more than the limit in any span, across clock-window
boundaries too), the refusal's message and true wait, and racing writers (two replicas)
never admitted past the limit."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.backends.mongo import connect
from engram.backends.sqlite import SqliteDatabase
from engram.domain.errors import RateLimited
from engram.domain.principals import Principal, Role
from engram.runtime.rate_limit import (
    SCHEMA,
    MongoRateLimitStore,
    RateLimitStore,
    SqliteRateLimitStore,
)
from engram.workspace.write_limits import WorkspaceWriteLimiter, WriteLimits
from tests.support.backends import RealBackends

pytestmark = pytest.mark.contract

ANN = Principal("ann", "acme", Role.MEMBER)
BOB = Principal("bob", "acme", Role.MEMBER)
ROOT = Principal("root", "acme", Role.ADMIN, platform_admin=True)
# 10:00:30 on some day: 30 s into a minute window, 30 s into an hour window.
START = 1_796_000_000.0 - 1_796_000_000.0 % 3600 + 30


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "mongo"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[RateLimitStore]:
    if request.param == "sqlite":
        database = SqliteDatabase(tmp_path / "limits.db")
        await database.open([SCHEMA])
        yield SqliteRateLimitStore(database)
        await database.close()
        return
    request.applymarker(pytest.mark.real_backend)
    client, mongo = connect(real_backends.url("mongo"), f"engram_{uuid.uuid4().hex[:12]}")
    yield MongoRateLimitStore(mongo)
    await client.drop_database(mongo.name)
    await client.close()


async def refused(limiter: WorkspaceWriteLimiter, who: Principal, space: str) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await limiter.check(who, space)
    return caught.value


async def test_the_minute_window_refuses_with_the_setting_and_the_true_wait(
    store: RateLimitStore,
) -> None:
    clock = Clock()
    limiter = WorkspaceWriteLimiter(store, WriteLimits(per_minute=3), clock=clock)
    for _ in range(3):
        await limiter.check(ANN, "s1")
        clock.now += 10
    clock.now -= 5  # 25 s after the first write
    error = await refused(limiter, ANN, "s1")
    assert error.reason == "RATE_LIMITED"
    assert "3 per minute" in error.message
    assert "ENGRAM_WORKSPACE_WRITES_PER_MINUTE" in error.message
    assert error.retry_after_seconds == 35  # until the first write is a minute old
    await limiter.check(ANN, "s2")  # another space is another agent
    await limiter.check(BOB, "s1")  # another principal too
    clock.now += 34.9
    await refused(limiter, ANN, "s1")
    clock.now += 0.1
    await limiter.check(ANN, "s1")  # the first write left the window: one more fits
    await refused(limiter, ANN, "s1")


async def test_a_clock_minute_boundary_lets_nothing_more_through(store: RateLimitStore) -> None:
    """20 writes just before a minute boundary: just after it, fixed windows would admit 20
    more; the sliding window refuses until the first is a minute old."""
    clock = Clock()
    clock.now += 29.5  # 10:00:59.5
    limiter = WorkspaceWriteLimiter(store, WriteLimits(per_minute=20), clock=clock)
    for _ in range(20):
        await limiter.check(ANN, "s1")
    clock.now += 1.0  # 10:01:00.5
    error = await refused(limiter, ANN, "s1")
    assert error.retry_after_seconds == 59.0


async def test_no_sixty_second_span_ever_admits_more_than_the_limit(
    store: RateLimitStore,
) -> None:
    """Two replicas (two limiters on one store) try 300 writes of one agent at random times
    over four and a half minutes, crossing four minute boundaries; every admitted write is
    checked against every 60 s span starting at an admitted write."""
    clock = Clock()
    replicas = [
        WorkspaceWriteLimiter(store, WriteLimits(per_minute=20, per_hour=200), clock=clock)
        for _ in range(2)
    ]
    shuffle = random.Random(31)
    admitted: list[float] = []
    for attempt in range(300):
        clock.now += shuffle.uniform(0, 1.8)
        try:
            await replicas[attempt % 2].check(ANN, "s1")
        except RateLimited as error:
            assert error.retry_after_seconds is not None and 0 < error.retry_after_seconds <= 60
            continue
        admitted.append(clock.now)
    for first in admitted:
        assert sum(first <= at < first + 60 for at in admitted) <= 20
    # Sliding windows still let the full rate through: 20 per 60 s over the run.
    assert len(admitted) >= 20 * int((admitted[-1] - admitted[0]) // 60)


async def test_the_hour_window_refuses_until_its_oldest_write_is_an_hour_old(
    store: RateLimitStore,
) -> None:
    clock = Clock()
    limiter = WorkspaceWriteLimiter(store, WriteLimits(per_minute=2, per_hour=5), clock=clock)
    for _ in range(2):
        await limiter.check(ANN, "s1")
    assert "2 per minute" in (await refused(limiter, ANN, "s1")).message
    clock.now += 60
    for _ in range(2):
        await limiter.check(ANN, "s1")
    clock.now += 60
    await limiter.check(ANN, "s1")  # the fifth; the minute-refused one did not count
    clock.now += 1
    error = await refused(limiter, ANN, "s1")
    assert "5 per hour" in error.message and "ENGRAM_WORKSPACE_WRITES_PER_HOUR" in error.message
    assert error.retry_after_seconds == 3600 - 121
    clock.now += 3600 - 121
    await limiter.check(ANN, "s1")


async def test_admins_are_limited_and_zero_means_no_limit(store: RateLimitStore) -> None:
    clock = Clock()
    limiter = WorkspaceWriteLimiter(store, WriteLimits(per_minute=1), clock=clock)
    await limiter.check(ROOT, "s1")
    await refused(limiter, ROOT, "s1")
    unlimited = WorkspaceWriteLimiter(store, WriteLimits(0, 0), clock=clock)
    for _ in range(50):
        await unlimited.check(ANN, "s9")


async def test_racing_writers_are_never_admitted_past_the_limit(store: RateLimitStore) -> None:
    """Two limiters on one store stand for two replicas; 40 writes race for 20 slots."""
    clock = Clock()
    replicas = [
        WorkspaceWriteLimiter(store, WriteLimits(per_minute=20, per_hour=200), clock=clock)
        for _ in range(2)
    ]

    async def write(n: int) -> bool:
        try:
            await replicas[n % 2].check(ANN, "s1")
        except RateLimited:
            return False
        return True

    admitted = await asyncio.gather(*(write(n) for n in range(40)))
    assert sum(admitted) == 20
    await replicas[0].check(BOB, "s1")  # another agent is not affected


async def test_on_sqlite_a_write_the_hour_refuses_uses_no_minute_slot(tmp_path: Path) -> None:
    """One transaction for both windows: a refused write is counted in neither, so once the
    hour ends the agent has its whole minute budget."""
    database = SqliteDatabase(tmp_path / "limits.db")
    await database.open([SCHEMA])
    try:
        clock = Clock()
        limiter = WorkspaceWriteLimiter(
            SqliteRateLimitStore(database), WriteLimits(per_minute=3, per_hour=2), clock=clock
        )
        for _ in range(2):
            await limiter.check(ANN, "s1")
        for _ in range(5):
            assert "2 per hour" in (await refused(limiter, ANN, "s1")).message
        minute = await database.read(
            lambda connection: connection.execute(
                "SELECT count(*) FROM rate_log WHERE key LIKE '%/minute'"
            ).fetchall()
        )
        assert minute == [(2,)]
    finally:
        await database.close()
