"""Dependency health: a background probe per backend turns the process's services
NOT_SERVING while one they need is unreachable, and SERVING again when it answers.

Probes run on a timer, never on the request path; each answers within `timeout` or counts
as down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from prometheus_client import Gauge

from engram.domain.errors import EngramError
from engram.runtime.tasks import cancel_and_wait

log = logging.getLogger(__name__)

BACKEND_UP = Gauge(
    "engram_backend_up",
    "1 while the backend answered its last health probe, else 0.",
    ("backend",),
)


@dataclass(frozen=True, slots=True)
class Dependency:
    """A backend the process's services need, and how to ask it whether it answers."""

    name: str
    # True when the backend answered; False (or an exception, or no answer in time) when not.
    probe: Callable[[], Awaitable[bool]]


class DependencyWatch:
    """Probes every dependency each `interval` seconds; `on_change(healthy)` is called with
    the new overall state whenever it changes (and once after the first round)."""

    def __init__(
        self,
        dependencies: Sequence[Dependency],
        on_change: Callable[[bool], Awaitable[None]],
        *,
        interval: float,
        timeout: float,
    ) -> None:
        self._dependencies = dependencies
        self._on_change = on_change
        self._interval = interval
        self._timeout = timeout
        self._down: set[str] = set()
        self._healthy: bool | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def down(self) -> frozenset[str]:
        return frozenset(self._down)

    async def check(self) -> bool:
        """One round of probes; reports a change of the overall state."""
        results = await asyncio.gather(*(self._probe(d) for d in self._dependencies))
        for dependency, up in zip(self._dependencies, results, strict=True):
            BACKEND_UP.labels(dependency.name).set(1 if up else 0)
            if up and dependency.name in self._down:
                self._down.discard(dependency.name)
                log.info("backend reachable again", extra={"backend": dependency.name})
            elif not up and dependency.name not in self._down:
                self._down.add(dependency.name)
                log.warning("backend unreachable", extra={"backend": dependency.name})
        healthy = not self._down
        if healthy != self._healthy:
            self._healthy = healthy
            await self._on_change(healthy)
        return healthy

    def start(self) -> None:
        if self._dependencies and self._task is None:
            self._task = asyncio.create_task(self._run(), name="dependency-watch")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check()

    async def _probe(self, dependency: Dependency) -> bool:
        try:
            return await asyncio.wait_for(dependency.probe(), self._timeout)
        except (EngramError, OSError, TimeoutError):  # each probe maps its driver's errors
            log.debug("probe failed", exc_info=True, extra={"backend": dependency.name})
            return False
