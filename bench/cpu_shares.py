"""Where the machine's CPU went during a measured window, by process.

A throughput figure on a shared 2-core box says little without it: the load generator and
a JVM may take as much CPU per call as the server measured. `CpuWindow` reads every
process's CPU time from /proc at the start and the end of a window, the machine's busy time
from /proc/stat, and the CPU of the children this process reaped meanwhile (a load
generator run to completion, such as ghz).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    ppid: int
    name: str
    seconds: float


def processes() -> dict[int, ProcessCpu]:
    """Every process's parent, command name and user + system CPU seconds."""
    found: dict[int, ProcessCpu] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # ended while listed
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        found[int(entry.name)] = ProcessCpu(
            ppid=int(fields[1]), name=name, seconds=(int(fields[11]) + int(fields[12])) / TICK
        )
    return found


def machine_busy() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / TICK


def _reaped() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CpuWindow:
    """CPU spent between `__enter__` and `__exit__`; read the shares after the window."""

    started: float = 0.0
    elapsed: float = 0.0
    busy: float = 0.0
    reaped: float = 0.0
    _before: dict[int, ProcessCpu] = field(default_factory=dict)
    _after: dict[int, ProcessCpu] = field(default_factory=dict)
    _marks: tuple[float, float] = (0.0, 0.0)

    def __enter__(self) -> CpuWindow:
        self._before = processes()
        self._marks = (machine_busy(), _reaped())
        self.started = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.elapsed = time.perf_counter() - self.started
        self._after = processes()
        self.busy = machine_busy() - self._marks[0]
        self.reaped = _reaped() - self._marks[1]

    def _spent(self, pid: int) -> float:
        before = self._before.get(pid)
        return self._after[pid].seconds - (before.seconds if before else 0.0)

    def of_tree(self, root: int) -> float:
        """CPU seconds of `root` and every descendant alive at the end."""
        children: dict[int, list[int]] = {}
        for pid, process in self._after.items():
            children.setdefault(process.ppid, []).append(pid)
        total, stack = 0.0, [root] if root in self._after else []
        while stack:
            pid = stack.pop()
            total += self._spent(pid)
            stack.extend(children.get(pid, []))
        return total

    def of_name(self, name: str) -> float:
        """CPU seconds of the processes named `name` (the kernel's 15-character comm)."""
        return sum(self._spent(pid) for pid, p in self._after.items() if p.name == name)

    @property
    def cores_busy(self) -> float:
        return self.busy / self.elapsed if self.elapsed else 0.0
