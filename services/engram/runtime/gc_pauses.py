"""Garbage-collector pauses: how long each collection of the cyclic GC held the interpreter.

A collection runs on whichever thread allocates when a generation's threshold is passed
and holds the GIL throughout, so a full (generation 2) collection over a large heap stalls
the event loop and every request it serves. Each pause is observed in the
`engram_gc_pause_seconds` histogram by generation, and a pause of at least
SLOW_PAUSE_SECONDS is logged, so a latency spike can be matched to a collection.

Most of a server's objects are made at start-up and live as long as the process (modules,
protobuf descriptors, settings, clients): `freeze_startup_heap` moves them out of the
collector's view once the process serves, so a full collection walks only what was made
since. A process entry point (`engram dev`, `engram serve`) calls it once it serves;
servers started inside a test process do not.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Gauge, Histogram

log = logging.getLogger(__name__)

GC_PAUSE_SECONDS = Histogram(
    "engram_gc_pause_seconds",
    "Time the cyclic garbage collector held the interpreter, by generation.",
    ("generation",),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
GC_FROZEN_OBJECTS = Gauge(
    "engram_gc_frozen_objects",
    "Objects frozen out of the collector's view at start-up (freeze_startup_heap).",
)
SLOW_PAUSE_SECONDS = 0.05

_started = 0.0


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    global _started
    if phase == "start":
        _started = time.perf_counter()
        return
    paused = time.perf_counter() - _started
    generation = int(info.get("generation", -1))
    GC_PAUSE_SECONDS.labels(str(generation)).observe(paused)
    if paused >= SLOW_PAUSE_SECONDS:
        log.warning(
            "garbage collection paused the process for %.0f ms",
            paused * 1000,
            extra={"generation": generation, "collected": info.get("collected", 0)},
        )


def watch_gc_pauses() -> None:
    """Starts observing collections in this process (idempotent)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def freeze_startup_heap() -> None:
    """Collects once, then freezes every object still alive (see the module), and watches
    the collections from then on."""
    gc.collect()
    gc.freeze()
    GC_FROZEN_OBJECTS.set(gc.get_freeze_count())
    watch_gc_pauses()
