"""Per-principal request-rate limits on expensive RPCs, shared by replicas through the store.

A fixed window per (principal, method): the store counts calls atomically (SQLite in
`engram dev`, MongoDB unique-_id slots in production, so replicas share one count); a call
past the limit is RESOURCE_EXHAUSTED with `google.rpc.RetryInfo` saying when the window
ends. Only the RPCs in `EXPENSIVE` are counted; a search counts only when it names more than
`search_min_spaces` spaces.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engram.domain.errors import RateLimited
from engram.domain.principals import Principal

SEARCH = "/engram.v1.SearchService/Search"
EXPENSIVE = frozenset(
    {
        "/engram.v1.StorageService/ImportSpace",
        "/engram.v1.StorageService/ExportSpace",
        "/engram.v1.IndexerService/Reindex",
        SEARCH,
    }
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS rate_windows (
    key TEXT NOT NULL,
    window INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (key, window)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rate_log (
    key TEXT NOT NULL,
    n INTEGER NOT NULL,
    t REAL NOT NULL,
    PRIMARY KEY (key, n)
) WITHOUT ROWID;
"""

# A sliding-window limit: at most `limit` calls of `key` in any `seconds`-long span.
Sliding = tuple[str, int, float]
# A call a sliding limit refused: the index of the limit, and the seconds until it admits.
Refusal = tuple[int, float]
# Claims of one log entry tried before a racing writer's refusal is assumed (each lost claim
# means another call was admitted meanwhile).
MAX_CLAIMS = 64


def sliding_wait(
    recent: Sequence[tuple[int, float]], limit: int, seconds: float, now: float
) -> float:
    """The wait before one more call, given the log's latest entries (n, t), newest first:
    0 while fewer than `limit` calls lie in the last `seconds`; otherwise until the oldest of
    the latest `limit` calls is `seconds` old."""
    if len(recent) < limit:
        return 0.0
    return max(0.0, recent[limit - 1][1] + seconds - now)


def next_entry(recent: Sequence[tuple[int, float]], now: float) -> tuple[int, float]:
    """The log entry (n, t) that records one more call: the next number, and a time never
    before the previous entry's (entries are ordered in time as in number, so any `limit`+1
    consecutive entries span at least `seconds`, whatever the replicas' clocks did)."""
    if not recent:
        return 0, now
    return recent[0][0] + 1, max(now, recent[0][1])


class RateLimitStore(Protocol):
    async def hit(self, key: str, window: int, limit: int) -> bool:
        """Counts one call in (key, window); False if `limit` calls were already counted."""
        ...

    async def hit_all(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """Counts one call in each (key, window, limit), in order; returns the index of the
        first one already full (None when every one admitted the call). Windows before the
        full one have counted the call (on SQLite none has: one transaction)."""
        ...

    async def admit(self, limits: Sequence[Sliding], now: float) -> Refusal | None:
        """Records one call at `now` in the log of each sliding limit (key, limit, seconds),
        unless one of them already holds `limit` calls in the last `seconds`: then nothing is
        recorded (on MongoDB, limits before a refusal found only by a racing writer keep the
        call, which only ever admits less) and the refusal says which and for how long."""
        ...


@dataclass(frozen=True, slots=True)
class RateLimits:
    # Calls per principal per method per window; 0 = no limit.
    per_window: int = 60
    window_seconds: int = 60
    search_min_spaces: int = 4


class RateLimiter:
    def __init__(
        self,
        store: RateLimitStore,
        limits: RateLimits,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits = limits
        self._clock = clock

    def applies(self, method: str, request: Any) -> bool:
        if self._limits.per_window <= 0 or method not in EXPENSIVE:
            return False
        if method == SEARCH:
            return len(getattr(request, "spaces", ())) > self._limits.search_min_spaces
        return True

    async def check(self, principal: Principal | None, method: str, request: Any) -> None:
        """Counts the call; raises RateLimited (with the wait) past the limit."""
        if principal is None or not self.applies(method, request):
            return
        now = self._clock()
        window = int(now // self._limits.window_seconds)
        key = f"{principal.tenant}/{principal.subject}{method}"
        if await self._store.hit(key, window, self._limits.per_window):
            return
        retry = max(1, math.ceil((window + 1) * self._limits.window_seconds - now))
        name = method.rsplit("/", 1)[-1]
        raise RateLimited(
            f"{name} is limited to {self._limits.per_window} calls per "
            f"{self._limits.window_seconds} s per caller (ENGRAM_RATE_LIMIT_PER_MINUTE); "
            f"retry in {retry} s",
            metadata={"method": name, "limit": str(self._limits.per_window)},
            retry_after_seconds=retry,
        )


class SqliteRateLimitStore:
    """One SQLite file (`engram dev`): an upsert per call in one write transaction."""

    def __init__(self, database: Any) -> None:
        self._database = database

    async def hit(self, key: str, window: int, limit: int) -> bool:
        def count(connection: sqlite3.Connection) -> bool:
            row = connection.execute(
                "INSERT INTO rate_windows (key, window, count) VALUES (?, ?, 1) "
                "ON CONFLICT (key, window) DO UPDATE SET count = count + 1 "
                "WHERE count < ? RETURNING count",
                (key, window, limit),
            ).fetchone()
            connection.execute(
                "DELETE FROM rate_windows WHERE key = ? AND window < ?", (key, window)
            )
            return row is not None

        result: bool = await self._database.write(count)
        return result

    async def hit_all(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """All windows in one write transaction: a call one window refuses is counted in
        none (one SQLite write per call instead of one per window)."""

        def count(connection: sqlite3.Connection) -> int | None:
            for index, (key, window, limit) in enumerate(hits):
                row = connection.execute(
                    "SELECT count FROM rate_windows WHERE key = ? AND window = ?", (key, window)
                ).fetchone()
                if row is not None and row[0] >= limit:
                    return index
            for key, window, _ in hits:
                connection.execute(
                    "INSERT INTO rate_windows (key, window, count) VALUES (?, ?, 1) "
                    "ON CONFLICT (key, window) DO UPDATE SET count = count + 1",
                    (key, window),
                )
                connection.execute(
                    "DELETE FROM rate_windows WHERE key = ? AND window < ?", (key, window)
                )
            return None

        result: int | None = await self._database.write(count)
        return result

    async def admit(self, limits: Sequence[Sliding], now: float) -> Refusal | None:
        """Every log in one write transaction: a refused call is recorded in none."""

        def record(connection: sqlite3.Connection) -> Refusal | None:
            latest = []
            for index, (key, limit, seconds) in enumerate(limits):
                recent = connection.execute(
                    "SELECT n, t FROM rate_log WHERE key = ? ORDER BY n DESC LIMIT ?",
                    (key, limit),
                ).fetchall()
                wait = sliding_wait(recent, limit, seconds, now)
                if wait > 0:
                    return index, wait
                latest.append(recent)
            for (key, limit, _), recent in zip(limits, latest, strict=True):
                n, t = next_entry(recent, now)
                connection.execute("INSERT INTO rate_log (key, n, t) VALUES (?, ?, ?)", (key, n, t))
                connection.execute(
                    "DELETE FROM rate_log WHERE key = ? AND n <= ?", (key, n - limit)
                )
            return None

        result: Refusal | None = await self._database.write(record)
        return result


class MongoRateLimitStore:
    """MongoDB (and FerretDB, whose updates are not atomic): call n of a window inserts the
    unique `_id` `<key>:<window>:<n>`, so however many replicas race, at most `limit`
    inserts succeed per window."""

    def __init__(
        self, database: Any, collection: str = "rate_windows", log: str = "rate_log"
    ) -> None:
        self._collection = database[collection]
        self._log = database[log]
        self._log_indexed = False

    async def hit(self, key: str, window: int, limit: int) -> bool:
        from pymongo.errors import DuplicateKeyError  # noqa: PLC0415 - production only

        from engram.backends.mongo import mongo_errors  # noqa: PLC0415 - production only

        prefix = f"{key}:{window}:"
        with mongo_errors("counting a rate-limited call"):
            taken = await self._collection.count_documents({"k": key, "w": window})
            if taken == 0:
                await self._collection.delete_many({"k": key, "w": {"$lt": window}})
            for slot in range(taken, limit):
                try:
                    await self._collection.insert_one(
                        {"_id": f"{prefix}{slot}", "k": key, "w": window}
                    )
                except DuplicateKeyError:
                    continue
                return True
        return False

    async def hit_all(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """One window after the other (no multi-document transactions on FerretDB): a call
        a later window refuses stays counted in the earlier ones."""
        for index, (key, window, limit) in enumerate(hits):
            if not await self.hit(key, window, limit):
                return index
        return None

    async def _recent(self, key: str, limit: int) -> list[tuple[int, float]]:
        cursor = self._log.find({"k": key}, {"n": 1, "t": 1}).sort("n", -1).limit(limit)
        return [(int(entry["n"]), float(entry["t"])) async for entry in cursor]

    async def admit(self, limits: Sequence[Sliding], now: float) -> Refusal | None:
        """Entry n of a key's log is the unique `_id` `<key>:<n>`, claimed by one insert: of
        racing replicas one wins each number, the others read the log again and check the
        limit against the new entries (FerretDB has no atomic conditional update)."""
        from pymongo.errors import DuplicateKeyError  # noqa: PLC0415 - production only

        from engram.backends.mongo import mongo_errors  # noqa: PLC0415 - production only

        with mongo_errors("recording a rate-limited call"):
            if not self._log_indexed:
                await self._log.create_index([("k", 1), ("n", -1)])
                self._log_indexed = True
            for index, (key, limit, seconds) in enumerate(limits):
                wait = sliding_wait(await self._recent(key, limit), limit, seconds, now)
                if wait > 0:
                    return index, wait
            for index, (key, limit, seconds) in enumerate(limits):
                for _ in range(MAX_CLAIMS):
                    recent = await self._recent(key, limit)
                    wait = sliding_wait(recent, limit, seconds, now)
                    if wait > 0:
                        return index, wait
                    n, t = next_entry(recent, now)
                    try:
                        await self._log.insert_one({"_id": f"{key}:{n}", "k": key, "n": n, "t": t})
                    except DuplicateKeyError:
                        continue
                    if n % limit == 0:
                        await self._log.delete_many({"k": key, "n": {"$lte": n - limit}})
                    break
                else:
                    return index, seconds / limit
        return None
