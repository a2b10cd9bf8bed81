"""A WatchSpace client for tests, and the burst scenario both feeds must pass: a watcher
disconnected mid-burst of writes resumes from its cursor, the storage server restarts in the
middle, and every change arrives exactly once and in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from engram.client import AsyncClient, EngramError, Space, SpaceChange, Unavailable

# A running storage server: its port while the context is open.
StartServer = Callable[[], AbstractAsyncContextManager[int]]

NOTES = Space(name="notes")


class _StreamBroke(Exception):
    """Raised from watch_space's on_resume: this watcher ends where the client would resume,
    so the scenario resumes by hand, from the last cursor, with a new watcher."""


@dataclass
class Watch:
    """One watch_space read in a task: changes in arrival order, caught_up, the end."""

    port: int
    ref: Space = NOTES
    cursor: str = ""
    from_start: bool = False
    token: str = ""
    # Disconnects (stops reading) after this many changes.
    stop_after: int | None = None
    changes: list[SpaceChange] = field(default_factory=list)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    # The watcher stopped reading after `stop_after` changes.
    stopped: bool = False
    # Why the watch ended otherwise: the server refused it, or the stream broke.
    ended_with: EngramError | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def last_cursor(self) -> str:
        return self.changes[-1].cursor if self.changes else self.cursor

    async def _run(self) -> None:
        try:
            await self._read()
        finally:
            self._arrived.set()

    def _broke(self, why: EngramError) -> None:
        self.ended_with = why
        raise _StreamBroke

    async def _read(self) -> None:
        async with AsyncClient(
            f"127.0.0.1:{self.port}", token=self.token, space=self.ref, retries=0
        ) as client:
            events = client.watch_space(
                cursor=self.cursor, from_start=self.from_start, on_resume=self._broke
            )
            try:
                async for event in events:
                    if event.caught_up:
                        assert event.change is None
                        assert not self.caught_up.is_set(), "caught_up came twice"
                        self.caught_up.set()
                        continue
                    assert event.change is not None
                    self.changes.append(event.change)
                    self._arrived.set()
                    if self.stop_after is not None and len(self.changes) >= self.stop_after:
                        self.stopped = True
                        return
            except _StreamBroke:
                pass
            except EngramError as error:
                self.ended_with = error
            finally:
                await events.aclose()

    async def received(self, count: int, *, within: float) -> None:
        """Waits until `count` changes arrived (or the stream ended)."""
        async with asyncio.timeout(within):
            while True:
                self._arrived.clear()
                if len(self.changes) >= count or self._task is None or self._task.done():
                    return
                await self._arrived.wait()

    async def ended(self, *, within: float) -> None:
        assert self._task is not None
        async with asyncio.timeout(within):
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def first_change(
    watcher: AsyncClient, *, cursor: str = "", from_start: bool = False
) -> SpaceChange | None:
    """The first thing a watch answers: a change, or None when it caught up first; a
    refusal raises as its domain error."""
    events = watcher.watch_space(cursor=cursor, from_start=from_start)
    try:
        return (await anext(events)).change
    finally:
        await events.aclose()


async def write_burst(port: int, writes: list[tuple[str, str]]) -> None:
    """Writes (path, content) one after another, each acknowledged before the next."""
    async with AsyncClient(f"127.0.0.1:{port}", space=NOTES, timeout=60) as client:
        for path, content in writes:
            await client.write_document(path, content)


def burst(count: int, *, paths: int) -> list[tuple[str, str]]:
    """`count` writes spread round-robin over `paths` documents: version n of each path
    is its n-th write."""
    return [(f"burst/doc-{i % paths:03d}.md", f"write {i}") for i in range(count)]


async def burst_with_disconnect_and_restart(
    start: StartServer, *, count: int, paths: int, within: float
) -> list[SpaceChange]:
    """Watches while `count` writes happen: the first watcher disconnects after a fifth of
    them, a second resumes from its cursor, the server stops after half the writes (the
    second watcher's stream breaks), and a third resumes from the second's cursor on the
    restarted server. Returns every change the three received, in arrival order."""
    writes = burst(count, paths=paths)
    half = count // 2
    received: list[SpaceChange] = []
    async with start() as port:
        async with Watch(port, stop_after=count // 5) as first:
            await first.caught_up.wait()
            writer = asyncio.create_task(write_burst(port, writes[:half]))
            await first.ended(within=within)
            assert first.stopped and first.ended_with is None
            received += first.changes
        second = Watch(port, cursor=first.last_cursor)
        await second.__aenter__()
        await writer
        await second.received(1, within=within)
    # The server stopped under the open stream, wherever it was.
    await second.ended(within=within)
    assert isinstance(second.ended_with, Unavailable), second.ended_with
    received += second.changes
    async with start() as port:
        async with Watch(port, cursor=second.last_cursor) as third:
            await write_burst(port, writes[half:])
            await third.received(count - len(received), within=within)
            received += third.changes
    return received


def assert_exactly_once_in_order(
    changes: list[SpaceChange], *, count: int, paths: int, global_order: bool
) -> None:
    """Every write of `burst(count, paths)` arrived once, cursors grow, each path's versions
    run 1, 2, 3 ... in order; with `global_order`, the changes follow the writes exactly."""
    assert len(changes) == count, f"{len(changes)} changes for {count} writes"
    assert len({c.event_id for c in changes}) == count, "a change arrived twice"
    positions = [int(c.cursor) for c in changes]
    assert positions == sorted(positions) and len(set(positions)) == count
    assert {c.kind for c in changes} == {"written"}
    per_path: dict[str, list[int]] = {}
    for change in changes:
        per_path.setdefault(change.path, []).append(change.version)
    assert len(per_path) == paths
    for path, versions in per_path.items():
        assert versions == list(range(1, count // paths + 1)), path
    if global_order:
        expected = [(path, i // paths + 1) for i, (path, _) in enumerate(burst(count, paths=paths))]
        assert [(c.path, c.version) for c in changes] == expected
