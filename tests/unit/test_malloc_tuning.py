"""Large blocks freed by a process go back to the OS once `keep_large_allocations_mapped`
ran: the vector index's per-space matrices, grown by copying into larger ones, used to leave
every old matrix on glibc's heap (the indexer's RSS grew by a quarter in a soak). Each case
runs in a fresh interpreter, since the setting is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Loads 100 "spaces" the way NumpyVectorIndex.open does (rows read into a scratch array,
# copied into an exact-size matrix), then grows each by one row as its first write does.
GROWTH = """
import json, sys
import numpy as np, psutil
from engram.runtime.malloc_tuning import keep_large_allocations_mapped
applied = keep_large_allocations_mapped() if sys.argv[1] == "tuned" else None
rss = lambda: psutil.Process().memory_info().rss / 2**20
spaces = []
for _ in range(100):
    scratch = np.random.rand(500, 384).astype(np.float32)
    matrix = np.empty((500, 384), dtype=np.float32)
    matrix[:] = scratch
    del scratch
    spaces.append(matrix)
loaded = rss()
for i, matrix in enumerate(spaces):
    grown = np.empty((1000, 384), dtype=np.float32)
    grown[:500] = matrix
    grown[500] = 1.0
    spaces[i] = grown
print(json.dumps({"applied": applied, "growth_mib": rss() - loaded}))
"""


def _run(mode: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    done = subprocess.run(
        [sys.executable, "-c", GROWTH, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_freed_matrices_are_returned_to_the_os() -> None:
    untuned = _run("untuned")
    tuned = _run("tuned")
    assert tuned["applied"] is True
    # 100 matrices of 750 KiB: glibc's default keeps ~73 MiB of freed ones on its heap.
    assert float(untuned["growth_mib"]) > 50  # type: ignore[arg-type]
    assert float(tuned["growth_mib"]) < 10  # type: ignore[arg-type]


def test_an_operators_own_malloc_tuning_wins() -> None:
    assert _run("tuned", MALLOC_MMAP_THRESHOLD_="4194304")["applied"] is False
    assert _run("tuned", GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")["applied"] is False
