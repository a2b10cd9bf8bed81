"""SqliteChangeFeed: `engram dev`'s change feed, read from the outbox table.

The outbox sequence is the cursor: one writer thread assigns it at commit, so a reader never
sees a later position before an earlier one, and a watcher that reads "everything after C"
in batches misses nothing. Watchers wake when the relay hands a batch to the in-process
publisher (they subscribe to it), and poll every `poll_seconds` besides. Published events are
kept for `retention` and then pruned by `run_retention` in bounded batches; a cursor of a space
expires only once one of that space's events after it was pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import Counter

from engram.backends.sqlite import SqliteDatabase
from engram.domain.changes import CAUGHT_UP, FeedItem, FeedStart, change_of, cursor_expired
from engram.domain.errors import EngramError
from engram.events.ports import OutboxMessage
from engram.storage.sqlite_outbox import SqliteOutbox
from engram.wire import decode_event

log = logging.getLogger(__name__)

PRUNED = Counter(
    "engram_feed_pruned_total", "Published events removed from the outbox after the retention."
)


@dataclass(frozen=True, slots=True)
class FeedOptions:
    retention: timedelta = timedelta(hours=168)
    batch_size: int = 256
    poll_seconds: float = 0.5
    prune_every_seconds: float = 60.0
    prune_batch: int = 1000
    # Batches one retention pass deletes at most; the next pass goes on.
    prune_batches_per_pass: int = 50


class SqliteChangeFeed:
    def __init__(
        self,
        database: SqliteDatabase,
        options: FeedOptions,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = database
        self._options = options
        self._clock = clock
        self._outbox = SqliteOutbox(database)
        self._published = asyncio.Event()

    async def published(self, messages: Sequence[OutboxMessage]) -> None:
        """The in-process publisher's subscriber: wakes every waiting watcher."""
        woken, self._published = self._published, asyncio.Event()
        woken.set()

    async def changes(self, space_id: str, start: FeedStart) -> AsyncGenerator[FeedItem, None]:
        after = await self._db.read_snapshot(lambda c: start.resolve(**_bounds(c, space_id)))
        batch = self._options.batch_size
        caught_up = False
        while True:
            # Taken before the read: a publish during the read still wakes the wait below.
            wake = self._published
            pruned, rows = await self._db.read_snapshot(
                functools.partial(_read, space_id=space_id, after=after, limit=batch)
            )
            if pruned > after:
                # The watcher fell behind the retention while it was reading.
                raise cursor_expired(after)
            for seq, payload in rows:
                after = seq
                yield change_of(decode_event(payload), seq)
            if len(rows) == batch:
                continue
            if not caught_up:
                caught_up = True
                yield CAUGHT_UP
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._options.poll_seconds):
                    await wake.wait()

    async def prune_once(self) -> int:
        """Deletes published events older than the retention, a bounded number of batches."""
        before = self._clock() - self._options.retention
        total = 0
        for _ in range(self._options.prune_batches_per_pass):
            deleted = await self._outbox.prune(before, limit=self._options.prune_batch)
            total += deleted
            if deleted < self._options.prune_batch:
                break
        PRUNED.inc(total)
        return total

    async def run_retention(self) -> None:
        """Prunes every `prune_every_seconds` until cancelled; a failed pass is logged and
        tried again next time."""
        while True:
            try:
                await self.prune_once()
            except EngramError as error:
                log.warning("pruning the change feed failed", extra={"error": str(error)})
            await asyncio.sleep(self._options.prune_every_seconds)


def _bounds(connection: sqlite3.Connection, space_id: str) -> dict[str, int]:
    """The space's oldest retained position and the newest position ever assigned
    (AUTOINCREMENT never reuses one, even after the newest rows were deleted)."""
    pruned = _pruned_through(connection, space_id)
    row = connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
    last = int(row[0]) if row else 0
    return {"first": pruned + 1, "last": max(last, pruned)}


def _pruned_through(connection: sqlite3.Connection, space_id: str) -> int:
    """The newest position of the space's events pruned so far (0: none)."""
    row = connection.execute(
        "SELECT pruned_through FROM outbox_retention WHERE space_id = ?", (space_id,)
    ).fetchone()
    return int(row[0]) if row else 0


def _read(
    connection: sqlite3.Connection, *, space_id: str, after: int, limit: int
) -> tuple[int, list[tuple[int, bytes]]]:
    rows: list[Any] = connection.execute(
        "SELECT seq, payload FROM outbox WHERE space_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (space_id, after, limit),
    ).fetchall()
    return _pruned_through(connection, space_id), [(int(seq), bytes(data)) for seq, data in rows]
