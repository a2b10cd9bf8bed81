"""The embedded SQLite database: one WAL file, one writer thread, a pool of readers.

Every write runs as one `BEGIN IMMEDIATE` transaction on the single writer thread, so
writes are serialised without lock waits; reads run concurrently on reader threads with
their own connections. Nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from engram.domain.errors import Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    # NORMAL in WAL mode survives process crashes (SIGKILL); only an OS crash can lose the
    # last transactions.
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=10000",
    "PRAGMA foreign_keys=ON",
    "PRAGMA cache_size=-32000",
    "PRAGMA temp_store=MEMORY",
)


def to_micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def from_micros(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, UTC)


def _in_transaction(connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    connection.execute("BEGIN IMMEDIATE")
    committed = False
    try:
        result = work(connection)
        connection.execute("COMMIT")
        committed = True
        return result
    finally:
        if not committed:
            connection.execute("ROLLBACK")


class SqliteDatabase:
    """Owns the connections to one SQLite file."""

    def __init__(self, path: Path, *, readers: int = 4) -> None:
        self.path = path
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=10.0
            )
            for pragma in PRAGMAS:
                connection.execute(pragma)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    async def open(
        self,
        schemas: Iterable[str],
        migrations: Iterable[Callable[[sqlite3.Connection], None]] = (),
    ) -> None:
        """Creates the file and every table and index, then brings tables made by an older
        release up to date with `migrations` (all idempotent)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        script = "\n".join(schemas)
        steps = list(migrations)

        def migrate(connection: sqlite3.Connection) -> None:
            connection.executescript(script)
            for step in steps:
                _in_transaction(connection, step)

        await self._run(self._writer, migrate)
        log.info("sqlite database open", extra={"path": str(self.path)})

    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Runs `work` in one immediate transaction on the writer thread."""

        return await self._run(self._writer, lambda connection: _in_transaction(connection, work))

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Runs `work` on a reader thread (a consistent snapshot per statement)."""
        return await self._run(self._readers, work)

    async def read_snapshot(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Runs `work` inside one read transaction, so every statement sees one snapshot."""

        def snapshot(connection: sqlite3.Connection) -> T:
            connection.execute("BEGIN")
            try:
                return work(connection)
            finally:
                connection.execute("COMMIT")

        return await self._run(self._readers, snapshot)

    async def _run(self, pool: ThreadPoolExecutor, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise Unavailable("the embedded database is closed (the server is shutting down)")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, lambda: work(self._connection()))
        except sqlite3.OperationalError as error:
            # Locked, disk full, I/O error: transient from the caller's point of view.
            raise Unavailable(f"embedded database error: {error}") from None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
