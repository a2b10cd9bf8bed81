"""The harness's RSS timeline (no deployment): per process, growth over the run and over its
second half, so a soak tells one-time warm-up (growth in the first half only) from a leak
(the second half grows too), and the time plot draws each process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


def _report() -> Any:
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from loadlib import report

    return report


def _timeline() -> list[tuple[float, dict[str, float]]]:
    # "indexer" warms up: +50 MiB in the first half, flat after. "search" leaks: +1 MiB per
    # 10 s throughout. "backend:nats" appears late (restarted by a fault).
    timeline = []
    for t in range(0, 101, 10):
        sample = {
            "indexer": (100 + min(t, 50)) * MIB,
            "search": (200 + t / 10) * MIB,
        }
        if t >= 60:
            sample["backend:nats"] = 30 * MIB
        timeline.append((float(t), sample))
    return timeline


def test_growth_tells_warm_up_from_a_leak() -> None:
    growth = _report().rss_growth(_timeline())
    assert growth["indexer"]["growth_percent"] == 50.0
    assert growth["indexer"]["second_half_percent"] == 0.0
    assert growth["search"]["growth_percent"] == 5.0
    assert growth["search"]["second_half_percent"] == 2.4  # 205 -> 210
    assert growth["backend:nats"]["start_mib"] == 30.0
    assert len(growth["indexer"]["samples"]) == 11


def test_table_and_plot(tmp_path: Path) -> None:
    report = _report()
    table = report.rss_table(report.rss_growth(_timeline()))
    assert "indexer" in table and "+50.0%" in table and "+0.0%" in table
    result = {
        "records": [[0.5, "search", 12.0, "OK", 0], [1.5, "append", 20.0, "OK", 0]],
        "freshness": [],
    }
    path = tmp_path / "time.png"
    report.plot_time(result, report.rss_growth(_timeline()), path, target_ms=50.0, title="t")
    assert path.stat().st_size > 10_000


def test_the_soak_bound_counts_engram_processes_only() -> None:
    report = _report()
    growth = report.rss_growth(
        [
            (0.0, {"indexer": 500.0 * MIB, "storage": 100.0 * MIB, "backend:mongo": 200.0 * MIB}),
            (60.0, {"indexer": 535.0 * MIB, "storage": 101.0 * MIB, "backend:mongo": 500.0 * MIB}),
        ]
    )
    figures = report.rss_bound(growth)
    assert figures == {
        "rss_growth_percent": 6.0,
        "rss_most_grown": "indexer",
        "rss_most_grown_percent": 7.0,
    }
