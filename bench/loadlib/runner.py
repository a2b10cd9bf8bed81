"""Fixed-rate runs (the generator in its own process), the knee search and the soak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadlib import procstats, report
from loadlib.deploy import Deployment
from loadlib.hooks import Fault

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
RSS_EVERY = 5.0


def _rss(snapshot: dict[str, dict[str, float]]) -> dict[str, float]:
    return {name: p["rss"] for name, p in snapshot.items()}


@dataclass
class Run:
    """One fixed-rate run: its summary (each process's RSS over time in `rss_over_time`) and
    the generator's raw result."""

    name: str
    summary: dict[str, Any]
    result: dict[str, Any]


@dataclass
class Harness:
    deployment: Deployment
    agents: list[dict[str, Any]]
    out: Path
    mix: dict[str, float]
    vocab_seed: int
    target_ms: float = 50.0
    timeout: float = 5.0
    max_outstanding: int = 256
    freshness_every: float = 1.0
    freshness_timeout: float = 30.0
    seed: int = 1
    runs: list[Run] = field(default_factory=list)

    @property
    def ledger(self) -> Path:
        return self.out / "ledger.jsonl"

    def run(
        self,
        name: str,
        rate: float,
        duration: float,
        *,
        faults: Sequence[Fault] = (),
        record: bool = True,
    ) -> Run:
        """The generator at `rate` for `duration` seconds; the deployment's CPU and RSS
        around it; faults started and polled on the way."""
        steps = self.out / "runs"
        steps.mkdir(parents=True, exist_ok=True)
        self.seed += 1
        d = self.deployment
        config = {
            "addresses": d.addresses,
            "tls": None
            if d.tls is None
            else {
                "ca": str(d.tls.ca),
                "cert": str(d.tls.cert) if d.tls.cert else None,
                "key": str(d.tls.key) if d.tls.key else None,
            },
            "agents": self.agents,
            "rate": rate,
            "duration": duration,
            "mix": self.mix,
            "max_outstanding": self.max_outstanding,
            "timeout": self.timeout,
            "seed": self.seed,
            "vocab_seed": self.vocab_seed,
            "freshness_every": self.freshness_every,
            "freshness_timeout": self.freshness_timeout,
            "ledger": str(self.ledger),
            "output": str(steps / f"{name}.json"),
        }
        config_path = steps / f"{name}.config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        # This tree's engram (its client) before any other on the path: a checkout whose
        # engram is not the one installed in the virtualenv runs its own generator.
        paths = [BENCH, ROOT / "services", ROOT]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
        before = procstats.snapshot(d.pids())
        rss = [(0.0, _rss(before))]
        with (steps / f"{name}.log").open("wb") as log:
            generator = subprocess.Popen(
                [sys.executable, "-m", "loadlib.generator", str(config_path)],
                cwd=BENCH,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started = time.monotonic()
        cap = started + duration + self.timeout + self.freshness_timeout + 90
        try:
            for fault in faults:
                fault.start(d)
            next_rss = started + RSS_EVERY
            while generator.poll() is None:
                if time.monotonic() > cap:
                    generator.kill()
                    raise TimeoutError(f"{name}: the generator overran its time cap")
                for fault in faults:
                    fault.poll(time.monotonic() - started)
                if time.monotonic() >= next_rss:
                    now = procstats.snapshot(d.pids())
                    rss.append((time.monotonic() - started, _rss(now)))
                    next_rss += RSS_EVERY
                time.sleep(0.2)
        finally:
            if generator.poll() is None:
                generator.kill()
                generator.wait(10)
        after = procstats.snapshot(d.pids())
        rss.append((time.monotonic() - started, _rss(after)))
        if generator.returncode != 0:
            tail = (steps / f"{name}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name}: the generator exited with {generator.returncode}\n{tail}")
        result = json.loads((steps / f"{name}.json").read_text(encoding="utf-8"))
        summary = report.summarize(result, procstats.delta(before, after), target_ms=self.target_ms)
        summary["name"] = name
        summary["rss_over_time"] = report.rss_growth(rss)
        if faults:
            summary["faults"] = {f.name: f.finish({**summary, "result": result}) for f in faults}
        run = Run(name, summary, result)
        if record:
            self.runs.append(run)
        return run

    def knee(
        self, *, start: float, factor: float, step_seconds: float, max_rate: float, max_steps: int
    ) -> tuple[float | None, list[Run]]:
        """Steps the rate up by `factor` until a step fails (p99 of search or writes over
        the target, or any error) or `max_rate`/`max_steps`; the knee is the last rate that
        passed. When the first step fails, the rate steps down (÷`factor`, at most 4 times)
        to the first that passes (None if none does). Either way one more step then runs
        halfway (geometrically) between the knee and the rate that failed above it, so the
        knee is within √`factor` of the rate where p99 breaks rather than within `factor`.
        Steps come back in rate order."""
        steps: list[Run] = []
        knee: float | None = None
        failed: float | None = None
        rate = start
        for index in range(max_steps):
            if rate > max_rate:
                break
            run = self.run(f"step{index:02d}-{rate:.1f}", rate, step_seconds)
            steps.append(run)
            s = run.summary
            self._say(rate, s)
            if not s["passed"]:
                failed = rate
                break
            knee = rate
            rate = round(rate * factor, 2)
        # The first rate already failed: step down instead, to at most `factor`**4 below.
        rate = start
        for index in range(4 if knee is None and steps else 0):
            rate = round(rate / factor, 2)
            run = self.run(f"down{index:02d}-{rate:.1f}", rate, step_seconds)
            steps.append(run)
            self._say(rate, run.summary)
            if run.summary["passed"]:
                knee = rate
                break
            failed = rate
        if knee is not None and failed is not None and failed > knee:
            rate = round((knee * failed) ** 0.5, 2)
            if knee < rate < failed:
                run = self.run(f"mid-{rate:.1f}", rate, step_seconds)
                steps.append(run)
                self._say(rate, run.summary)
                if run.summary["passed"]:
                    knee = rate
        steps.sort(key=lambda step: float(step.summary["rate"]))
        return knee, steps

    @staticmethod
    def _say(rate: float, s: dict[str, Any]) -> None:
        groups = s["groups"]
        search = groups.get("search", {}).get("latency_ms", {}).get("p99", float("nan"))
        write = groups.get("write", {}).get("latency_ms", {}).get("p99", float("nan"))
        print(
            f"  rate {rate:7.1f}/s  done {s['achieved_rate']:7.1f}/s  "
            f"errors {s['errors']:4}  search p99 {report.ms(search)} ms  "
            f"write p99 {report.ms(write)} ms  {'pass' if s['passed'] else 'FAIL'}",
            flush=True,
        )
