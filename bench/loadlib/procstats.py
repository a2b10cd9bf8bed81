"""CPU seconds and RSS of the deployment's processes (psutil), each with its children (a
backend's process group: PostgreSQL's backends under FerretDB, OpenSearch's JVM)."""

from __future__ import annotations

import psutil


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def snapshot(pids: dict[str, int]) -> dict[str, dict[str, float]]:
    """name -> {cpu: user+system seconds, rss: bytes} summed over the process tree."""
    out: dict[str, dict[str, float]] = {}
    for name, pid in pids.items():
        cpu = 0.0
        rss = 0.0
        for process in _tree(pid):
            try:
                times = process.cpu_times()
                cpu += times.user + times.system
                rss += process.memory_info().rss
            except psutil.Error:
                continue
        out[name] = {"cpu": cpu, "rss": rss, "pid": float(pid)}
    return out


def delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Per process: CPU seconds spent between the snapshots, RSS at both ends. A process
    whose pid changed (restarted) counts from 0."""
    out: dict[str, dict[str, float]] = {}
    for name, end in after.items():
        start = before.get(name)
        same = start is not None and start["pid"] == end["pid"]
        out[name] = {
            "cpu_seconds": end["cpu"] - (start["cpu"] if same and start else 0.0),
            "rss_start": start["rss"] if start else 0.0,
            "rss_end": end["rss"],
        }
    return out
