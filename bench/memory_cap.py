"""Runs processes under a memory limit: a cgroup of their own (v1 `memory` or v2), as a
pod's `resources.limits.memory` would.

An engine that maps its files counts the pages it has read in its RSS, though the kernel may
drop them whenever memory is short. Capped, the kernel must reclaim within the limit, so
the RSS and the search latency measured under the cap say whether the engine works in that
much memory. Processes forked while the caller is inside the cgroup (`holding`) stay in it,
and every page they touch from then on is charged to it; the caller leaves. Needs root (it
writes /sys/fs/cgroup).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


@dataclass
class MemoryCap:
    """The cgroup; read its figures before the `memory_cap` block ends."""

    directory: Path
    v1: bool

    @contextlib.contextmanager
    def holding(self, pid: int) -> Iterator[None]:
        """`pid` inside the cgroup for the block (what it forks meanwhile stays there)."""
        (self.directory / "cgroup.procs").write_text(str(pid))
        try:
            yield
        finally:
            (self.directory.parent / "cgroup.procs").write_text(str(pid))

    @property
    def peak_mib(self) -> float:
        """The most memory (anonymous + page cache) the cgroup held."""
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        return int((self.directory / name).read_text().split()[0]) / 2**20

    @property
    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.v1 else "memory.events"
        fields = (self.directory / name).read_text().split()
        return int(fields[fields.index("oom_kill") + 1]) if "oom_kill" in fields else 0


@contextlib.contextmanager
def memory_cap(limit_mib: int, name: str) -> Iterator[MemoryCap]:
    """A new cgroup limited to `limit_mib` of memory, emptied and removed at the end."""
    v1 = V1.is_dir()
    directory = (V1 if v1 else V2) / name
    directory.mkdir()
    try:
        limit = str(limit_mib * 2**20)
        (directory / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(limit)
        yield MemoryCap(directory, v1)
    finally:
        # What is still inside (a fork server outlives the engines it forked) leaves first.
        with contextlib.suppress(OSError):
            for pid in (directory / "cgroup.procs").read_text().split():
                (directory.parent / "cgroup.procs").write_text(pid)
            directory.rmdir()
