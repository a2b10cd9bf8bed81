"""Background work at a lower CPU priority than requests.

Linux keeps a nice value per thread, and a thread starts with its creator's: a worker
thread lowered here hands the lower priority on to the threads its native library starts
from it (onnxruntime's intra-op pool, tantivy's indexing and merge threads). On a machine
where the server and the indexer share two cores, the indexer then takes the CPU that
requests leave instead of half of it.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)


def lower_thread_priority(nice: int) -> None:
    """Makes the calling thread `nice` steps nicer (a no-op for 0 or where unsupported).
    Meant as a thread pool's `initializer`."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + nice)
    except OSError as error:
        log.warning("could not lower a background thread's priority: %s", error)
