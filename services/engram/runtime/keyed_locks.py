"""Per-key asyncio locks that disappear when nobody holds or waits for them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable, Iterable


class KeyedLocks:
    """`async with locks.hold(key):` serialises work on one key within this process.

    Used to single-flight changes to one document (or one counter): racing writers in one
    process queue instead of losing optimistic races and retrying. Correctness across
    processes still comes from the backend's conditional writes.
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    @contextlib.asynccontextmanager
    async def hold_all(self, keys: Iterable[Hashable]) -> AsyncIterator[None]:
        """Holds several keys, always acquired in sorted order so holders never deadlock."""
        async with contextlib.AsyncExitStack() as stack:
            for key in sorted(set(keys), key=repr):
                await stack.enter_async_context(self.hold(key))
            yield

    def __len__(self) -> int:
        return len(self._locks)
