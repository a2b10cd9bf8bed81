"""The harness's knee search, on hand-made steps (no deployment): a step passes below a
given rate. The knee must be found within √factor of it, from either side of the start."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runner() -> Any:
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from loadlib import runner

    return runner


def _harness(breaks_at: float, tmp_path: Path) -> tuple[Any, list[float]]:
    runner = _runner()
    ran: list[float] = []
    harness = runner.Harness(deployment=None, agents=[], out=tmp_path, mix={}, vocab_seed=0)

    def run(name: str, rate: float, duration: float, **_: Any) -> Any:
        ran.append(rate)
        passed = rate < breaks_at
        summary = {
            "rate": rate,
            "achieved_rate": rate,
            "errors": 0,
            "passed": passed,
            "groups": {"search": {"latency_ms": {"p99": 10.0 if passed else 90.0}}},
        }
        return runner.Run(name, summary, {})

    harness.run = run  # type: ignore[method-assign]
    return harness, ran


@pytest.mark.parametrize(
    ("breaks_at", "knee", "ran"),
    [
        # Up from 5: 5 and 7.5 pass, 11.25 fails; halfway between 7.5 and 11.25 is 9.19.
        (10.0, 9.19, [5.0, 7.5, 11.25, 9.19]),
        # Halfway fails: the knee stays the last rate that passed.
        (9.0, 7.5, [5.0, 7.5, 11.25, 9.19]),
        # Down from a failing start: 5 and 3.33 fail, 2.22 passes, then halfway up (2.72).
        (3.0, 2.72, [5.0, 3.33, 2.22, 2.72]),
    ],
)
def test_the_knee_is_refined_between_the_last_pass_and_the_first_failure(
    breaks_at: float, knee: float, ran: list[float], tmp_path: Path
) -> None:
    harness, rates = _harness(breaks_at, tmp_path)
    found, steps = harness.knee(
        start=5.0, factor=1.5, step_seconds=1.0, max_rate=1000.0, max_steps=15
    )
    assert found == knee
    assert rates == ran
    assert [s.summary["rate"] for s in steps] == sorted(ran), "steps in rate order"


def test_no_rate_passes(tmp_path: Path) -> None:
    harness, rates = _harness(0.1, tmp_path)
    found, steps = harness.knee(
        start=5.0, factor=1.5, step_seconds=1.0, max_rate=1000.0, max_steps=15
    )
    assert found is None and len(rates) == 5 and len(steps) == 5
