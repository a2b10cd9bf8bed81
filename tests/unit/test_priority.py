"""Background threads run nicer than request threads."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from engram.runtime.priority import lower_thread_priority

pytestmark = pytest.mark.unit


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_lowered_pool_thread_and_the_threads_it_starts_are_nicer_and_others_are_not() -> None:
    base = _own_nice()
    lowered = min(base + 10, 19)  # the kernel caps nice values at 19
    with ThreadPoolExecutor(1, initializer=lower_thread_priority, initargs=(10,)) as pool:
        assert pool.submit(_own_nice).result() == lowered

        def child_nice() -> int:
            seen: list[int] = []
            child = threading.Thread(target=lambda: seen.append(_own_nice()))
            child.start()
            child.join()
            return seen[0]

        assert pool.submit(child_nice).result() == lowered
    assert _own_nice() == base
    with ThreadPoolExecutor(1, initializer=lower_thread_priority, initargs=(0,)) as pool:
        assert pool.submit(_own_nice).result() == base
