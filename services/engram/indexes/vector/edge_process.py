"""EngineProcess: the child process that runs the Qdrant Edge engine for `EdgeVectorIndex`.

One worker of a `ProcessPoolExecutor`, forked from multiprocessing's fork server with the
engine module (`edge_host`) preloaded. The pool gives what the index needs of a child for
free: calls run one at a time in order, a call whose caller gave up (a search's timeout) is
cancelled unless it already reached the child, and a child that dies fails its pending
calls with `BrokenProcessPool` instead of hanging them.

A dead child is replaced on the next call: a new one is started and `reopen` (the index's)
loads the shards into it before any call reaches it. A call the dead child was running
fails with IndexUnavailable (it may or may not have been applied; the caller retries); a
call made after it died never reached it, so it runs on the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.util
import os
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from engram.indexes.ports import IndexUnavailable
from engram.indexes.vector import edge_host
from engram.indexes.vector.edge_host import EngineFailure

log = logging.getLogger(__name__)

# After a failed restart of the engine process, calls fail at once for this long.
RESTART_BACKOFF_SECONDS = 2.0
DIED = (
    "the vector engine's process died during this call; the next call starts a new one, "
    "which reopens the shards from disk (acknowledged writes are in the WAL)"
)
NOT_OPEN = "the vector index is not open"
T = TypeVar("T")
# Runs one engine call in a given process (what `reopen` and `closing` are handed).
Run = Callable[..., Awaitable[Any]]


class EngineProcess:
    """The engine's child process: started by `start`, replaced when it dies, stopped by
    `stop`."""

    def __init__(self, reopen: Callable[[Run], Awaitable[None]]) -> None:
        self._reopen = reopen
        self._pool: ProcessPoolExecutor | None = None
        self._running = False
        self._restart: asyncio.Task[ProcessPoolExecutor] | None = None
        self._restart_failed: tuple[float, str] | None = None
        # Each pool's one worker process (its id, read from it once started).
        self._pids: weakref.WeakKeyDictionary[ProcessPoolExecutor, int] = (
            weakref.WeakKeyDictionary()
        )

    async def start(self) -> None:
        """Starts the process and runs `reopen` in it; raises what `reopen` raised."""
        self._pool = await self._new_pool()
        self._running = True

    async def stop(self, closing: Callable[[Run], Awaitable[None]]) -> None:
        """Runs `closing` in the process (after the calls already sent), then ends it."""
        self._running = False
        restart, self._restart = self._restart, None
        if restart is not None:
            with contextlib.suppress(IndexUnavailable):
                await restart
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await closing(_runner(pool))
            finally:
                await _shut(pool)

    async def call(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in the process; IndexUnavailable for what the engine raised, and
        if the process died during the call."""
        for attempt in range(2):
            pool = await self._live()
            try:
                if not _alive(self._pids.get(pool)):
                    # Died while idle, and the pool may not have noticed yet (a fork
                    # server's child is reaped by the fork server, before the pool's
                    # manager thread hears of it): the call would be handed to a dead pool.
                    raise _NotSent
                return await _run(pool, work, *args)
            except _NotSent:
                self._lost(pool)
                if attempt:
                    raise IndexUnavailable(DIED) from None
            except _Died:
                self._lost(pool)
                raise IndexUnavailable(DIED) from None
        raise AssertionError("unreachable")

    async def _live(self) -> ProcessPoolExecutor:
        if self._pool is not None:
            return self._pool
        if not self._running:
            raise IndexUnavailable(NOT_OPEN)
        if self._restart is None:
            if self._restart_failed is not None:
                failed_at, why = self._restart_failed
                if time.monotonic() - failed_at < RESTART_BACKOFF_SECONDS:
                    raise IndexUnavailable(f"the vector engine's process could not start: {why}")
            self._restart = asyncio.create_task(self._restarted())
        # Shielded: a caller that gives up (a search's timeout) leaves the restart running.
        return await asyncio.shield(self._restart)

    async def _restarted(self) -> ProcessPoolExecutor:
        started = time.perf_counter()
        try:
            pool = await self._new_pool()
        except BaseException as error:
            message = error.message if isinstance(error, IndexUnavailable) else repr(error)
            self._restart_failed = (time.monotonic(), message)
            log.error("vector engine process could not restart", extra={"error": message})
            raise
        finally:
            self._restart = None
        self._restart_failed = None
        if not self._running:  # stopped meanwhile
            await _shut(pool)
            raise IndexUnavailable(NOT_OPEN)
        self._pool = pool
        log.warning(
            "vector engine process restarted", extra={"seconds": time.perf_counter() - started}
        )
        return pool

    async def _new_pool(self) -> ProcessPoolExecutor:
        pool = _start_pool()
        try:
            await self._reopen(_runner(pool))
            self._pids[pool] = await _runner(pool)(edge_host.pid)
        except BaseException:
            await _shut(pool)
            raise
        return pool

    def _lost(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            self._pool = None
            log.error("vector engine process died")
        pool.shutdown(wait=False, cancel_futures=True)


class _NotSent(Exception):
    """The process was gone before the call was handed to it."""


class _Died(Exception):
    """The process died while the call was queued or running."""


def _alive(pid: int | None) -> bool:
    """Whether the process `pid` still exists (True when not known). Once reaped it is
    gone; a zombie not yet reaped still counts as alive."""
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_pool() -> ProcessPoolExecutor:
    """A new engine process, forked from multiprocessing's fork server: a single-threaded
    process started once (none of this process's threads or locks), with the engine module
    and the pool's worker already imported: a new engine answers its first call ~0.2 s
    after it starts, against ~0.8 s for a spawned interpreter (measured here)."""
    context: multiprocessing.context.BaseContext
    if _fork_server_fits():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([edge_host.__name__, "concurrent.futures.process"])
    else:
        context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=edge_host.start)


# Linux's longest AF_UNIX socket path (sun_path is 108 bytes with its NUL).
_UNIX_PATH_MAX = 107
# Where CPython 3.14's multiprocessing goes when $TMPDIR is too long for its sockets.
_SYSTEM_TEMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def _fork_server_fits() -> bool:
    """Whether the fork server's socket path fits: it listens on
    `<multiprocessing's temp dir>/listener-XXXXXXXX`, under $TMPDIR, and a long $TMPDIR
    (a container's or a test's scratch directory) fails with "AF_UNIX path too long".

    As CPython 3.14 does (gh-132124), multiprocessing's temp dir then goes under a system
    temp directory instead, when one is writable and short enough. Else the engine is a
    spawned process: it needs no socket, but it starts slower, and it must be able to enter
    this process's working directory (spawn changes into it)."""
    if not _listener_fits(os.path.join(tempfile.gettempdir(), "pymp-XXXXXXXX")):
        base = _short_temp_base()
        if base is not None:
            _make_multiprocessing_temp_dir(base)
    # multiprocessing made its temp dir already (under $TMPDIR) if this did not.
    return _listener_fits(multiprocessing.util.get_temp_dir())


def _listener_fits(temp_dir: str) -> bool:
    listener = os.path.join(temp_dir, "listener-XXXXXXXX")
    return len(os.fsencode(listener)) <= _UNIX_PATH_MAX


def _make_multiprocessing_temp_dir(base: str) -> None:
    """multiprocessing makes its temp dir once, under tempfile's directory: it is made
    under `base` by setting `tempfile.tempdir` (the documented override) for that call."""
    saved = tempfile.tempdir
    tempfile.tempdir = base
    try:
        multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def _short_temp_base() -> str | None:
    """A system temp directory where multiprocessing's temp dir and socket fit."""
    for base in _SYSTEM_TEMP_DIRS:
        if _listener_fits(os.path.join(base, "pymp-XXXXXXXX")) and os.access(
            base, os.W_OK | os.X_OK
        ):
            return base
    return None


async def _shut(pool: ProcessPoolExecutor) -> None:
    await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


async def _run(pool: ProcessPoolExecutor, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in the process; an engine failure as IndexUnavailable, _NotSent or
    _Died if the process is gone."""
    try:
        future = pool.submit(work, *args)
    except BrokenProcessPool:
        raise _NotSent from None
    except RuntimeError:  # shut down by stop()
        raise IndexUnavailable(NOT_OPEN) from None
    try:
        return await asyncio.wrap_future(future)
    except BrokenProcessPool:
        raise _Died from None
    except EngineFailure as error:
        raise IndexUnavailable(f"qdrant edge failed: {error}") from None


def _runner(pool: ProcessPoolExecutor) -> Run:
    async def run(work: Callable[..., Any], *args: Any) -> Any:
        try:
            return await _run(pool, work, *args)
        except (_NotSent, _Died):
            raise IndexUnavailable(DIED) from None

    return run
