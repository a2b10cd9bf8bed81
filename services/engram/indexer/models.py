"""Embedding models and their vector collections: which ones the worker writes, which one
search reads, and switching from one model to another without search ever failing.

The vector index keeps one collection per model behind an alias (the *active* model, which
search reads). An indexer configured with another model than the active one starts a
switch: it creates the new model's collection (the *pending* one), writes every change into
both - embedding with each model - while `ModelSwitch` copies every stored document into
the new collection, then moves the alias in one step and, after a grace period for searches
that read the old alias just before, drops the old collection.

The old model's embedder is rebuilt from its model id and the settings
(`engram.indexer.embedders.embedder_for_model`); when that is impossible the old
collection stops receiving changes during the switch, and semantic search over it cannot
embed queries until the switch ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, wait_fixed

from engram.domain.chunks import ModelInfo
from engram.domain.errors import EngramError
from engram.domain.spaces import SpaceRef
from engram.indexes.ports import Embedder, VectorIndex
from engram.runtime.retrying import log_before_retry

log = logging.getLogger(__name__)
T = TypeVar("T")

EmbedderFactory = Callable[[ModelInfo], Embedder | None]


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """A collection the worker writes, and the embedder whose vectors it holds."""

    model: ModelInfo
    embedder: Embedder


async def known_model(embedder: Embedder) -> ModelInfo:
    """The embedder's model, asking an HTTP provider for one embedding first if its
    dimension was not configured."""
    probe = getattr(embedder, "probe", None)
    if probe is not None:
        model: ModelInfo = await probe()
        return model
    return embedder.model


async def warm_embedder(embedder: Embedder) -> None:
    """Loads an in-process model (`warm_up`) and runs one inference, so the first request
    pays for neither; a model that cannot load fails here, before health says SERVING.
    HTTP providers have nothing to load and are left alone."""
    warm_up = getattr(embedder, "warm_up", None)
    if warm_up is None:
        return
    await warm_up()
    await embedder.embed_query("warm up")


async def close_embedder(embedder: Embedder) -> None:
    aclose = getattr(embedder, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    close = getattr(embedder, "close", None)
    if close is not None:
        await asyncio.to_thread(close)


class IndexModels:
    """The active model, a pending one during a switch, and an embedder for each.

    Also answers search's question "which embedder makes query vectors for this model?"
    (`for_model`), so queries always match the collection the alias names.
    """

    def __init__(
        self,
        vector: VectorIndex,
        configured: Embedder,
        *,
        factory: EmbedderFactory | None = None,
        refresh_seconds: float = 5.0,
    ) -> None:
        self._vector = vector
        self._configured = configured
        self._factory = factory
        self._refresh_seconds = refresh_seconds
        # By model id: the configured embedder, and the active model's during a switch
        # (built by `factory`, whose caller owns and closes what it builds).
        self.embedders: dict[str, Embedder] = {}
        self._active: ModelInfo | None = None
        self._pending: ModelInfo | None = None
        self._checked_at = 0.0

    @property
    def configured(self) -> ModelInfo:
        return self._configured.model

    @property
    def active(self) -> ModelInfo | None:
        return self._active

    @property
    def pending(self) -> ModelInfo | None:
        return self._pending

    async def open(self) -> None:
        """Creates the configured model's collection; activates it if none is active, else
        marks it pending when the active model is another one."""
        model = self._configured.model
        self.embedders[model.model_id] = self._configured
        await self._vector.ensure_collection(model)
        active = await self._vector.active_model()
        if active is None:
            await self._vector.activate(model.model_id)
            active = model
        self._set_active(active)
        self._checked_at = time.monotonic()

    def for_model(self, model: ModelInfo) -> Embedder | None:
        """The embedder of `model` (search's query embedder), or None if there is none here."""
        embedder = self.embedders.get(model.model_id)
        if embedder is None or embedder.model.dimension != model.dimension:
            return None
        return embedder

    async def targets(self) -> list[ModelTarget]:
        """The collections a change goes to: the active model's (if it can be embedded for
        here) and the pending model's."""
        await self.refresh()
        found: list[ModelTarget] = []
        if self._active is not None:
            embedder = self.embedders.get(self._active.model_id)
            if embedder is not None:
                found.append(ModelTarget(self._active, embedder))
        pending = self.pending_target()
        if pending is not None:
            found.append(pending)
        return found

    def pending_target(self) -> ModelTarget | None:
        if self._pending is None:
            return None
        return ModelTarget(self._pending, self._configured)

    async def refresh(self, *, force: bool = False) -> bool:
        """Re-reads the alias (at most every `refresh_seconds` unless forced), since another
        replica may finish a switch; True if the active model changed."""
        now = time.monotonic()
        if not force and now - self._checked_at < self._refresh_seconds:
            return False
        self._checked_at = now
        active = await self._vector.active_model()
        if active is None or active == self._active:
            return False
        log.info(
            "the active embedding model changed",
            extra={"model": active.model_id, "previous": getattr(self._active, "model_id", None)},
        )
        self._set_active(active)
        return True

    async def activate_pending(self) -> ModelInfo | None:
        """Points the alias at the pending model; returns the model it replaced."""
        pending, previous = self._pending, self._active
        if pending is None:
            return None
        await self._vector.activate(pending.model_id)
        self._set_active(pending)
        return previous

    async def drop_inactive(self) -> list[str]:
        """Drops every collection but the active and pending ones (single-process use: in
        a fleet another replica may be filling one)."""
        keep = {m.model_id for m in (self._active, self._pending) if m is not None}
        dropped = []
        for model in await self._vector.collections():
            if model.model_id not in keep:
                await self._vector.drop_collection(model.model_id)
                dropped.append(model.model_id)
        return dropped

    def _set_active(self, active: ModelInfo) -> None:
        configured = self._configured.model
        self._active = active
        self._pending = None if active.model_id == configured.model_id else configured
        if self._pending is not None and active.model_id not in self.embedders:
            built = self._factory(active) if self._factory is not None else None
            if built is None:
                log.warning(
                    "no embedder for the active model: its collection gets no changes and "
                    "semantic search cannot embed queries until the switch completes",
                    extra={"model": active.model_id},
                )
                return
            self.embedders[active.model_id] = built


class _DocumentsFailed(Exception):
    """Some documents could not be indexed into the pending collection (retried). Internal to
    the switch's retry loop: it never reaches a caller, so it is not a domain error."""


class ModelSwitch:
    """Fills the pending model's collection from every stored document, then moves the
    alias to it and drops the old collection after `drop_grace_seconds`."""

    def __init__(
        self,
        models: IndexModels,
        vector: VectorIndex,
        documents: Callable[[], AsyncIterator[tuple[SpaceRef, str]]],
        index: Callable[[SpaceRef, str], Awaitable[object]],
        *,
        concurrency: int = 4,
        drop_grace_seconds: float = 30.0,
        retry_seconds: float = 5.0,
    ) -> None:
        self._models = models
        self._vector = vector
        self._documents = documents
        self._index = index
        self._concurrency = concurrency
        self._drop_grace = drop_grace_seconds
        self._retry_seconds = retry_seconds
        self._task: asyncio.Task[None] | None = None
        self.indexed = 0
        self.completed = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="model-switch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        pending = self._models.pending
        if pending is None:
            self.completed.set()
            return
        log.info(
            "model switch: filling the new collection",
            extra={"model": pending.model_id, "from": getattr(self._models.active, "model_id", "")},
        )
        left: list[tuple[SpaceRef, str]] | None = None

        async def fill() -> None:
            # The first pass lists every document (a failed listing starts over); later
            # passes index only the documents that failed, until none is left or another
            # replica completed the switch.
            nonlocal left
            left = await self._fill(self._documents() if left is None else _iterate(left))
            if left and self._models.pending is not None:
                raise _DocumentsFailed(f"{len(left)} documents failed")

        await self._until_done("filling the collection", fill)
        old = await self._until_done("moving the alias", self._models.activate_pending)
        log.info(
            "model switch: the alias names the new model",
            extra={"model": pending.model_id, "documents": self.indexed},
        )
        self.completed.set()
        if old is not None and old.model_id != pending.model_id:
            await asyncio.sleep(self._drop_grace)
            try:
                await self._vector.drop_collection(old.model_id)
            except EngramError as error:
                # Only space is lost: the collection gets no writes and no searches.
                log.warning(
                    "model switch: dropping the old collection failed",
                    extra={"model": old.model_id, "error": error.message},
                )
                return
            log.info("model switch: dropped the old collection", extra={"model": old.model_id})

    async def _until_done(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """Runs `step` until it does not raise an EngramError, `retry_seconds` apart."""

        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((EngramError, _DocumentsFailed)),
            wait=wait_fixed(self._retry_seconds),
            before_sleep=log_before_retry(log, f"model switch: {what} failed; retrying"),
        ):
            with attempt:
                done = await step()
        return done

    async def _fill(
        self, documents: AsyncIterator[tuple[SpaceRef, str]]
    ) -> list[tuple[SpaceRef, str]]:
        """Indexes each document into the pending collection; returns those that failed."""
        semaphore = asyncio.Semaphore(self._concurrency)
        failed: list[tuple[SpaceRef, str]] = []
        tasks: set[asyncio.Task[None]] = set()

        async def one(space: SpaceRef, path: str) -> None:
            try:
                await self._index(space, path)
                self.indexed += 1
            except Exception as error:  # noqa: BLE001 - retried with the other failures
                log.warning(
                    "model switch: indexing a document failed",
                    exc_info=not isinstance(error, EngramError),
                    extra={"space_id": space.id, "path": path, "error": str(error)},
                )
                failed.append((space, path))
            finally:
                semaphore.release()

        try:
            async for space, path in documents:
                if self._models.pending is None:
                    break  # another replica completed the switch
                await semaphore.acquire()
                task = asyncio.create_task(one(space, path))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        return failed


async def _iterate(items: list[tuple[SpaceRef, str]]) -> AsyncIterator[tuple[SpaceRef, str]]:
    for item in items:
        yield item
