"""glibc malloc: large allocations stay memory-mapped, so memory they free goes back to the OS.

glibc serves an allocation of at least M_MMAP_THRESHOLD bytes (128 KiB to start with) by
its own mmap, and gives it back to the kernel when it is freed. But each time such a block
is freed, glibc raises the threshold to that block's size (up to 32 MiB), so later
allocations of that size come from the heap instead, and when they are freed their memory
stays in the process unless it happens to sit at the heap's top.

The indexer and search keep a numpy matrix per space (`NumpyVectorIndex`), grown by copying
into a larger one; a space of 500 chunks has a 750 KiB matrix. After start-up raised the
threshold, every growth left the old matrix on the heap: measured on the load harness's
100k-chunk corpus, the indexer's RSS rose by about 157 MiB (26 %) over a 10-minute soak,
all of it memory `malloc_trim` handed back (bench/RESULTS.md). Setting the threshold once
turns off glibc's raising, so these blocks are mapped, and unmapped when freed.

An operator's own `MALLOC_MMAP_THRESHOLD_` (glibc's tunable) wins; other C libraries (musl)
are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # <malloc.h>
THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value
OPERATOR_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


def keep_large_allocations_mapped(threshold: int = THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap threshold at `threshold` bytes; False when it was not set (not
    glibc, or the operator chose a malloc tuning of their own)."""
    if any(name in os.environ for name in OPERATOR_TUNABLES):
        log.info("malloc: left to the operator's tuning")
        return False
    try:
        # glibc names itself here; musl and others do not. The process already has libc
        # loaded, so its symbols are found without searching for the library (which
        # `ctypes.util.find_library` does by running ldconfig: ~19 ms at every start).
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    if not libc.startswith("glibc"):
        log.info("malloc: not glibc, mmap threshold left alone")
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("malloc: mallopt(M_MMAP_THRESHOLD) refused", extra={"bytes": threshold})
        return False
    return True
