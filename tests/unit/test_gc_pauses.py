"""Collections of the cyclic GC are observed: the histogram counts each one by generation,
and a pause long enough to stall requests is logged."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from engram.runtime import gc_pauses


@pytest.fixture(autouse=True)
def unwatched_after() -> Iterator[None]:
    """The watch is process-wide: stop it after each test, or the rest of the test session
    logs its own collections."""
    yield
    while gc_pauses._on_collection in gc.callbacks:
        gc.callbacks.remove(gc_pauses._on_collection)


def _collections(generation: int) -> float:
    value = REGISTRY.get_sample_value(
        "engram_gc_pause_seconds_count", {"generation": str(generation)}
    )
    return value or 0.0


def test_each_full_collection_is_counted() -> None:
    gc_pauses.watch_gc_pauses()
    gc_pauses.watch_gc_pauses()  # idempotent: still one observation per collection
    before = _collections(2)
    gc.collect()
    gc.collect()
    assert _collections(2) == before + 2


def test_a_slow_pause_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gc_pauses.watch_gc_pauses()
    monkeypatch.setattr(gc_pauses, "SLOW_PAUSE_SECONDS", 0.0)
    with caplog.at_level(logging.WARNING, logger=gc_pauses.__name__):
        gc.collect()
    assert any("garbage collection paused" in r.getMessage() for r in caplog.records)
