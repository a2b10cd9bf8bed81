"""Streaming imports: an authorized session that reads an archive as its pieces arrive.

`StorageService.begin_import` authorizes before the first byte is read; the session then
decompresses and validates each piece off the event loop (bounded steps, see
`engram.storage.archive.ArchiveReader`) and charges the bytes it holds to its principal's
in-flight budget, so neither one call nor many parallel calls of one principal can make
the server hold more than the configured bytes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from engram.domain.errors import InvalidArgument, RateLimited
from engram.domain.principals import Principal
from engram.storage.archive import ArchiveEntry, ArchiveLimits, ArchiveReader

# Pieces smaller than this are gathered before a worker thread parses them.
FEED_BATCH_BYTES = 1024 * 1024

R = TypeVar("R")


class ImportBudgetExceeded(RateLimited):
    reason = "IMPORT_IN_FLIGHT_LIMIT"


class InFlightBudget:
    """Bytes held by running imports, per principal (thread-safe: readers run in threads)."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._held: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def take(self, key: tuple[str, str], size: int) -> None:
        with self._lock:
            held = self._held.get(key, 0) + size
            if held > self._limit:
                raise ImportBudgetExceeded(
                    f"your imports in progress hold more than {self._limit} bytes "
                    "(ENGRAM_MAX_IMPORT_INFLIGHT_BYTES); wait for them to finish, then retry",
                    metadata={"limit_bytes": str(self._limit)},
                )
            self._held[key] = held

    def release(self, key: tuple[str, str], size: int) -> None:
        with self._lock:
            held = self._held.get(key, 0) - size
            if held > 0:
                self._held[key] = held
            else:
                self._held.pop(key, None)

    def held(self, key: tuple[str, str]) -> int:
        with self._lock:
            return self._held.get(key, 0)


def principal_key(principal: Principal) -> tuple[str, str]:
    return (principal.tenant, principal.subject)


class _HeldBytes:
    """The bytes one import holds against its principal's in-flight budget.

    The reader is told to charge here, not to its stream: a reader calling back into the
    stream that owns it made every import a reference cycle, and a cycle of a long call is
    in the oldest generation by the time it ends, so each import's decompressed entries
    stayed in memory until a full collection (issue 29).
    """

    def __init__(self, budget: InFlightBudget, key: tuple[str, str]) -> None:
        self._budget = budget
        self._key = key
        self._held = 0

    def take(self, size: int) -> None:
        """Called by the reader for each decompressed step, before it keeps any of it."""
        if size:
            self._budget.take(self._key, size)
            self._held += size

    def release(self) -> None:
        self._budget.release(self._key, self._held)
        self._held = 0


class ImportStream(Generic[R]):
    """Receives one authorized archive upload, then commits it; `close` must run (it
    returns the bytes held to the principal's budget and drops whatever was read)."""

    def __init__(
        self,
        principal: Principal,
        limits: ArchiveLimits,
        budget: InFlightBudget,
        commit: Callable[[list[ArchiveEntry]], Awaitable[R]],
        *,
        skip_unsupported: bool = False,
    ) -> None:
        self._limits = limits
        self._held = _HeldBytes(budget, principal_key(principal))
        self._reader = ArchiveReader(
            limits, account=self._held.take, skip_unsupported=skip_unsupported
        )
        self._commit = commit
        self._received = 0
        self._batch: list[bytes] = []
        self._batch_bytes = 0

    async def feed(self, data: bytes) -> None:
        """Takes one uploaded piece; parses in a worker thread once a batch has gathered."""
        if not data:
            return
        self._received += len(data)
        if self._received > self._limits.max_bytes:
            raise InvalidArgument(
                f"archive is over {self._limits.max_bytes} bytes (ENGRAM_MAX_IMPORT_BYTES); "
                "split it",
                field="data",
            )
        self._batch.append(data)
        self._batch_bytes += len(data)
        if self._batch_bytes >= FEED_BATCH_BYTES:
            await self._flush()

    async def commit(self) -> R:
        """Once the upload has ended: validates its end, then writes every document."""
        await self._flush()
        return await self._commit(self._reader.finish())

    def close(self) -> None:
        """Gives the held bytes back and drops the upload: a refused or failed import's
        entries and inflate state are freed here, whoever still refers to the stream."""
        self._held.release()
        self._reader.discard()
        self._batch, self._batch_bytes = [], 0

    async def _flush(self) -> None:
        if not self._batch:
            return
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        await asyncio.to_thread(self._parse, batch)

    def _parse(self, batch: list[bytes]) -> None:
        for piece in batch:
            self._reader.feed(piece)
