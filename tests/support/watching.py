"""A WatchSpace client for tests, and the burst scenario both feeds must pass: a watcher
disconnected mid-burst of writes resumes from its cursor, the storage server restarts in the
middle, and every change arrives exactly once and in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import grpc

from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc
from tests.support.grpc_helpers import space, write_request

# A running storage server: its port while the context is open.
StartServer = Callable[[], AbstractAsyncContextManager[int]]


@dataclass
class Watch:
    """One WatchSpace stream read in a task: changes in arrival order, caught_up, the end."""

    port: int
    ref: space_pb2.SpaceRef = field(default_factory=space)
    cursor: str = ""
    from_start: bool = False
    metadata: tuple[tuple[str, str], ...] = ()
    # Disconnects (cancels the call) after this many changes.
    stop_after: int | None = None
    changes: list[storage_pb2.SpaceChange] = field(default_factory=list)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    ended_with: grpc.StatusCode | None = None
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

    async def _read(self) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = storage_pb2_grpc.StorageServiceStub(channel).WatchSpace(
                storage_pb2.WatchSpaceRequest(
                    space=self.ref, cursor=self.cursor, from_start=self.from_start
                ),
                metadata=self.metadata,
            )
            try:
                async for response in call:
                    if response.caught_up:
                        assert not response.HasField("change")
                        assert not self.caught_up.is_set(), "caught_up came twice"
                        self.caught_up.set()
                        continue
                    self.changes.append(response.change)
                    self._arrived.set()
                    if self.stop_after is not None and len(self.changes) >= self.stop_after:
                        call.cancel()
                        self.ended_with = grpc.StatusCode.CANCELLED
                        return
            except grpc.aio.AioRpcError as error:
                self.ended_with = error.code()

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


async def write_burst(port: int, writes: list[tuple[str, str]]) -> None:
    """Writes (path, content) one after another, each acknowledged before the next."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        for path, content in writes:
            await stub.WriteDocument(write_request(path, content), timeout=60)


def burst(count: int, *, paths: int) -> list[tuple[str, str]]:
    """`count` writes spread round-robin over `paths` documents: version n of each path
    is its n-th write."""
    return [(f"burst/doc-{i % paths:03d}.md", f"write {i}") for i in range(count)]


async def burst_with_disconnect_and_restart(
    start: StartServer, *, count: int, paths: int, within: float
) -> list[storage_pb2.SpaceChange]:
    """Watches while `count` writes happen: the first watcher disconnects after a fifth of
    them, a second resumes from its cursor, the server stops after half the writes (the
    second watcher's stream breaks), and a third resumes from the second's cursor on the
    restarted server. Returns every change the three received, in arrival order."""
    writes = burst(count, paths=paths)
    half = count // 2
    received: list[storage_pb2.SpaceChange] = []
    async with start() as port:
        async with Watch(port, stop_after=count // 5) as first:
            await first.caught_up.wait()
            writer = asyncio.create_task(write_burst(port, writes[:half]))
            await first.ended(within=within)
            assert first.ended_with == grpc.StatusCode.CANCELLED
            received += first.changes
        second = Watch(port, cursor=first.last_cursor)
        await second.__aenter__()
        await writer
        await second.received(1, within=within)
    # The server stopped under the open stream, wherever it was.
    await second.ended(within=within)
    assert second.ended_with is not None and second.ended_with != grpc.StatusCode.OK
    received += second.changes
    async with start() as port:
        async with Watch(port, cursor=second.last_cursor) as third:
            await write_burst(port, writes[half:])
            await third.received(count - len(received), within=within)
            received += third.changes
    return received


def assert_exactly_once_in_order(
    changes: list[storage_pb2.SpaceChange], *, count: int, paths: int, global_order: bool
) -> None:
    """Every write of `burst(count, paths)` arrived once, cursors grow, each path's versions
    run 1, 2, 3 ... in order; with `global_order`, the changes follow the writes exactly."""
    assert len(changes) == count, f"{len(changes)} changes for {count} writes"
    assert len({c.event_id for c in changes}) == count, "a change arrived twice"
    positions = [int(c.cursor) for c in changes]
    assert positions == sorted(positions) and len(set(positions)) == count
    assert {c.kind for c in changes} == {storage_pb2.CHANGE_KIND_WRITTEN}
    per_path: dict[str, list[int]] = {}
    for change in changes:
        per_path.setdefault(change.path, []).append(change.version)
    assert len(per_path) == paths
    for path, versions in per_path.items():
        assert versions == list(range(1, count // paths + 1)), path
    if global_order:
        expected = [(path, i // paths + 1) for i, (path, _) in enumerate(burst(count, paths=paths))]
        assert [(c.path, c.version) for c in changes] == expected
