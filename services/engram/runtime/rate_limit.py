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
"""


class RateLimitStore(Protocol):
    async def hit(self, key: str, window: int, limit: int) -> bool:
        """Counts one call in (key, window); False if `limit` calls were already counted."""
        ...

    async def hit_all(self, hits: Sequence[tuple[str, int, int]]) -> int | None:
        """Counts one call in each (key, window, limit), in order; returns the index of the
        first one already full (None when every one admitted the call). Windows before the
        full one have counted the call (on SQLite none has: one transaction)."""
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


class MongoRateLimitStore:
    """MongoDB (and FerretDB, whose updates are not atomic): call n of a window inserts the
    unique `_id` `<key>:<window>:<n>`, so however many replicas race, at most `limit`
    inserts succeed per window."""

    def __init__(self, database: Any, collection: str = "rate_windows") -> None:
        self._collection = database[collection]

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
