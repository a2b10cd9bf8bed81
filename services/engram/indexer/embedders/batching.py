"""Micro-batching: concurrent embedding calls share one model job.

An in-process model costs much less per text in a batch than one text at a time (one
session run pays its fixed cost once, and the matrix kernels run on wider inputs), and it
runs one job at a time anyway. `EmbeddingBatcher` queues each call's texts; a drain task
takes the queue's head, waits until `window` seconds after that call arrived (or until
`max_batch` texts wait), and sends every waiting call's texts - at most `max_batch`, and
whole calls only - to the model as one job. The window is only waited while calls arrive
together (the last job carried more than one): a lone caller at low load is answered at
once instead of paying the window for company that does not come. At most `parallel` jobs
run at once (one per core the model may use); while they run, new calls queue, so under
load batches fill without any waiting. With `window` 0 nothing waits: only calls that
arrive while every slot is busy share a job.

Each caller gets its own rows. A job that fails fails only the calls in it: an engram error
as it is, anything else as IndexUnavailable naming the cause. A caller cancelled while
queued is left out of the next job; one cancelled while its job runs just drops its rows,
and with `cancel_abandoned` a job whose callers have all given up is cancelled (an HTTP
POST nobody waits for would otherwise hold its slot until its timeout and retries end).
The queue is bounded (`max_pending` texts): a call beyond it fails at once with
IndexUnavailable rather than waiting behind an ever longer queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from prometheus_client import Histogram

from engram.domain.errors import EngramError
from engram.indexes.ports import IndexUnavailable, Vectors

BATCH_TEXTS = Histogram(
    "engram_embed_batch_texts",
    "Texts per model job of a micro-batched embedder, by embedder name (query, document).",
    ("embedder",),
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)

ModelJob = Callable[[list[str]], Awaitable[Vectors]]


@dataclass(slots=True)
class _Call:
    texts: Sequence[str]
    future: asyncio.Future[Vectors]
    arrived: float


@dataclass(slots=True)
class _Queue:
    """The calls waiting on one event loop, the task draining them and the running jobs."""

    loop: asyncio.AbstractEventLoop
    slots: asyncio.Semaphore
    calls: deque[_Call] = field(default_factory=deque)
    texts: int = 0
    full: asyncio.Event = field(default_factory=asyncio.Event)
    drain: asyncio.Task[None] | None = None
    jobs: set[asyncio.Task[None]] = field(default_factory=set)
    # Whether the last job carried more than one call: callers are arriving together.
    together: bool = False


class EmbeddingBatcher:
    """Runs `job` on the texts of concurrent `embed` calls together (see the module)."""

    def __init__(
        self,
        job: ModelJob,
        *,
        window: float,
        max_batch: int,
        max_pending: int,
        name: str,
        parallel: int = 1,
        cancel_abandoned: bool = False,
    ) -> None:
        if window < 0 or max_batch < 1 or max_pending < max_batch or parallel < 1:
            raise ValueError(
                "window >= 0, max_batch >= 1, max_pending >= max_batch, parallel >= 1 required"
            )
        self._job = job
        self._parallel = parallel
        self._window = window
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._name = name
        self._cancel_abandoned = cancel_abandoned
        self._queue: _Queue | None = None

    @property
    def pending(self) -> int:
        """Texts queued and not yet sent to the model."""
        return self._queue.texts if self._queue is not None else 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The rows of `texts`, computed in a job shared with concurrent calls."""
        queue = self._current_queue()
        if queue.texts + len(texts) > self._max_pending and queue.calls:
            raise IndexUnavailable(
                f"{self._name} embedding queue full ({queue.texts} texts waiting); retry later"
            )
        call = _Call(texts, queue.loop.create_future(), queue.loop.time())
        queue.calls.append(call)
        queue.texts += len(texts)
        if queue.texts >= self._max_batch:
            queue.full.set()
        if queue.drain is None or queue.drain.done():
            queue.drain = queue.loop.create_task(self._drain(queue), name=f"embed-{self._name}")
        return await call.future

    async def aclose(self) -> None:
        """Stops the drain task and the running jobs' tasks (a model run already started
        finishes on its thread); their calls and those still queued fail with
        IndexUnavailable."""
        queue, self._queue = self._queue, None
        if queue is None:
            return
        tasks = [*queue.jobs, *([queue.drain] if queue.drain is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _current_queue(self) -> _Queue:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue.loop is not loop:
            # A new event loop (tests run several): the old one's queue cannot be awaited.
            self._queue = _Queue(loop, asyncio.Semaphore(self._parallel))
        return self._queue

    async def _drain(self, queue: _Queue) -> None:
        try:
            while queue.calls:
                await queue.slots.acquire()
                try:
                    await self._wait_window(queue)
                    batch = self._take(queue)
                except BaseException:
                    queue.slots.release()
                    raise
                if not batch:
                    queue.slots.release()
                    continue
                job = queue.loop.create_task(self._run(batch), name=f"embed-{self._name}-job")
                queue.jobs.add(job)
                job.add_done_callback(partial(_job_done, queue))
                if self._cancel_abandoned:
                    _cancel_when_abandoned(batch, job)
        except asyncio.CancelledError:
            _fail(queue.calls, self._closed())
            queue.calls.clear()
            queue.texts = 0
            raise

    def _closed(self) -> IndexUnavailable:
        return IndexUnavailable(f"{self._name} embedder closed")

    async def _wait_window(self, queue: _Queue) -> None:
        remaining = queue.calls[0].arrived + self._window - queue.loop.time()
        if remaining <= 0 or queue.texts >= self._max_batch or not queue.together:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await queue.full.wait()

    def _take(self, queue: _Queue) -> list[_Call]:
        """Whole calls from the head, up to `max_batch` texts (a larger call goes alone);
        calls whose caller gave up are dropped."""
        batch: list[_Call] = []
        size = 0
        while queue.calls:
            call = queue.calls[0]
            if call.future.done():
                queue.calls.popleft()
                queue.texts -= len(call.texts)
                continue
            if batch and size + len(call.texts) > self._max_batch:
                break
            queue.calls.popleft()
            queue.texts -= len(call.texts)
            batch.append(call)
            size += len(call.texts)
        if queue.texts < self._max_batch:
            queue.full.clear()
        if batch:
            queue.together = len(batch) > 1
        return batch

    async def _run(self, batch: list[_Call]) -> None:
        texts = [text for call in batch for text in call.texts]
        BATCH_TEXTS.labels(self._name).observe(len(texts))
        try:
            vectors = await self._job(texts)
        except asyncio.CancelledError:
            _fail(batch, self._closed())
            raise
        except EngramError as error:
            _fail(batch, error)
            return
        except Exception as error:  # noqa: BLE001 - handed to exactly the callers of this job
            failure = IndexUnavailable(
                f"{self._name} embedding of {len(texts)} texts failed: "
                f"{type(error).__name__}: {error}"
            )
            failure.__cause__ = error
            _fail(batch, failure)
            return
        start = 0
        for call in batch:
            rows = np.asarray(vectors[start : start + len(call.texts)])
            start += len(call.texts)
            if not call.future.done():
                call.future.set_result(rows)


def _job_done(queue: _Queue, job: asyncio.Task[None]) -> None:
    queue.jobs.discard(job)
    queue.slots.release()


def _cancel_when_abandoned(batch: list[_Call], job: asyncio.Task[None]) -> None:
    """Cancels `job` once the caller of every call in it has given up (cancelled)."""

    def check(_: asyncio.Future[Vectors]) -> None:
        if not job.done() and all(call.future.cancelled() for call in batch):
            job.cancel()

    for call in batch:
        call.future.add_done_callback(check)


def _fail(calls: Sequence[_Call] | deque[_Call], error: Exception) -> None:
    for call in calls:
        if not call.future.done():
            call.future.set_exception(error)
