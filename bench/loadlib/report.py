"""Figures from the generator's rows, the text table, the plots (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from loadlib.generator import OPS, SEARCHES, WRITES

GROUPS = {"search": SEARCHES, "write": WRITES, "read": ("read",)}


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


def latency_figures(latencies: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "p99": percentile(latencies, 99),
        "max": max(latencies) if latencies else math.nan,
    }


def summarize(
    result: dict[str, Any], processes: dict[str, dict[str, float]], *, target_ms: float
) -> dict[str, Any]:
    """Per RPC and per group: count, errors by code, latency of the successful calls,
    degraded answers; freshness; CPU seconds per request of each process; pass/fail."""
    rows = result["records"]
    by_op: dict[str, list[list[Any]]] = defaultdict(list)
    for row in rows:
        by_op[row[1]].append(row)

    def figures(selected: list[list[Any]]) -> dict[str, Any]:
        errors: dict[str, int] = defaultdict(int)
        for row in selected:
            if row[3] != "OK":
                errors[row[3]] += 1
        ok = [row[2] for row in selected if row[3] == "OK"]
        return {
            "count": len(selected),
            "errors": sum(errors.values()),
            "error_codes": dict(errors),
            "degraded": sum(1 for row in selected if row[4]),
            "latency_ms": latency_figures(ok),
        }

    per_op = {op: figures(by_op[op]) for op in OPS if by_op.get(op)}
    groups = {
        name: figures([row for op in ops for row in by_op.get(op, [])])
        for name, ops in GROUPS.items()
    }
    groups = {name: g for name, g in groups.items() if g["count"]}
    fresh = [f[1] * 1000 for f in result["freshness"] if f[1] is not None]
    freshness = {
        "samples": len(result["freshness"]),
        "not_found": sum(1 for f in result["freshness"] if f[1] is None),
        **{k: v for k, v in latency_figures(fresh).items()},
        "poll_errors": result.get("freshness_poll_errors", {}),
    }
    vector_probes = result.get("vector_freshness", [])
    vector_fresh = [f[1] * 1000 for f in vector_probes if f[1] is not None]
    vector_freshness = {
        "samples": len(vector_probes),
        "not_found": sum(1 for f in vector_probes if f[1] is None),
        **latency_figures(vector_fresh),
    }
    completed = sum(1 for row in rows if row[3] != "OVERFLOW")
    cpu = {
        name: {
            "cpu_seconds": round(p["cpu_seconds"], 3),
            "cpu_ms_per_request": round(1000 * p["cpu_seconds"] / completed, 3)
            if completed
            else math.nan,
            "rss_start_mib": round(p["rss_start"] / 2**20, 1),
            "rss_end_mib": round(p["rss_end"] / 2**20, 1),
        }
        for name, p in processes.items()
    }
    cpu["generator"] = {
        "cpu_seconds": round(result["generator_cpu_seconds"], 3),
        "cpu_ms_per_request": round(1000 * result["generator_cpu_seconds"] / completed, 3)
        if completed
        else math.nan,
    }
    errors = sum(g["errors"] for g in per_op.values())
    checks = {
        name: groups[name]["latency_ms"]["p99"] <= target_ms
        for name in ("search", "write")
        if name in groups
    }
    return {
        "rate": result["rate"],
        "duration": result["duration"],
        "scheduled": result["scheduled"],
        "completed": completed,
        "achieved_rate": round(completed / result["duration"], 2) if result["duration"] else 0,
        "errors": errors,
        "per_rpc": per_op,
        "groups": groups,
        "freshness_ms": freshness,
        "vector_freshness_ms": vector_freshness,
        "processes": cpu,
        "generator_lag_ms": result["generator_lag_ms"],
        "error_samples": result.get("error_samples", {}),
        "passed": errors == 0 and all(checks.values()),
        "checks": checks,
    }


def ms(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def step_table(steps: list[dict[str, Any]]) -> str:
    head = (
        f"{'rate/s':>8} {'done/s':>7} {'err':>5} {'search p50':>10} {'p95':>7} {'p99':>7} "
        f"{'write p50':>9} {'p95':>7} {'p99':>7} {'read p99':>8} {'fresh p50':>9} "
        f"{'p99':>7}  pass"
    )
    lines = [head, "-" * len(head)]
    for s in steps:
        g = s["groups"]

        def lat(group: str, q: str, g: dict[str, Any] = g) -> str:
            return ms(g[group]["latency_ms"][q]) if group in g else "-"

        lines.append(
            f"{s['rate']:>8.1f} {s['achieved_rate']:>7.1f} {s['errors']:>5} "
            f"{lat('search', 'p50'):>10} {lat('search', 'p95'):>7} {lat('search', 'p99'):>7} "
            f"{lat('write', 'p50'):>9} {lat('write', 'p95'):>7} {lat('write', 'p99'):>7} "
            f"{lat('read', 'p99'):>8} {ms(s['freshness_ms']['p50']):>9} "
            f"{ms(s['freshness_ms']['p99']):>7}  {'yes' if s['passed'] else 'NO'}"
        )
    return "\n".join(lines)


def rpc_table(summary: dict[str, Any]) -> str:
    head = (
        f"{'rpc':<14} {'count':>7} {'errors':>6} {'degraded':>8} {'p50':>7} {'p95':>7} "
        f"{'p99':>7} {'max':>7}"
    )
    lines = [head, "-" * len(head)]
    for op, f in summary["per_rpc"].items():
        lat = f["latency_ms"]
        codes = ", ".join(f"{k} {v}" for k, v in f["error_codes"].items())
        lines.append(
            f"{op:<14} {f['count']:>7} {f['errors']:>6} {f['degraded']:>8} {ms(lat['p50']):>7} "
            f"{ms(lat['p95']):>7} {ms(lat['p99']):>7} {ms(lat['max']):>7}"
            + (f"  ({codes})" if codes else "")
        )
    fresh = summary["freshness_ms"]
    lines.append(
        f"keyword-leg freshness (write acknowledged -> found by lexical search): "
        f"{fresh['samples']} samples, "
        f"p50 {ms(fresh['p50'])} ms, p99 {ms(fresh['p99'])} ms, max {ms(fresh['max'])} ms, "
        f"not found {fresh['not_found']}"
    )
    vector = summary.get("vector_freshness_ms")
    if vector and vector["samples"]:
        lines.append(
            f"vector-leg freshness (acknowledged -> found by semantic search): "
            f"{vector['samples']} samples, p50 {ms(vector['p50'])} ms, "
            f"p99 {ms(vector['p99'])} ms, max {ms(vector['max'])} ms, "
            f"not found {vector['not_found']}"
        )
    lines.append("")
    head = (
        f"{'process':<20} {'CPU s':>8} {'CPU ms/req':>10} {'RSS start MiB':>13} "
        f"{'RSS end MiB':>11} {'growth':>7}"
    )
    lines += [head, "-" * len(head)]
    for name, p in summary["processes"].items():
        start, end = p.get("rss_start_mib"), p.get("rss_end_mib")
        growth = f"{100 * (end - start) / start:+.1f}%" if start and end else "-"
        lines.append(
            f"{name:<20} {p['cpu_seconds']:>8.2f} {p['cpu_ms_per_request']:>10.3f} "
            f"{'-' if start is None else start:>13} {'-' if end is None else end:>11} "
            f"{growth:>7}"
        )
    return "\n".join(lines)


def rss_growth(timeline: list[tuple[float, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per process, from its RSS samples over a run: MiB at the start, the middle and the
    end, growth over the run and over its second half (in %), and every sample. Growth that
    is all in the first half is warm-up; a second half growing like the first is a leak."""
    out: dict[str, dict[str, Any]] = {}
    names = {name for _, sample in timeline for name in sample}
    for name in sorted(names):
        points = [(t, sample[name] / 2**20) for t, sample in timeline if name in sample]
        if len(points) < 2:
            continue
        end = points[-1][0]
        start_mib = points[0][1]
        # The sample nearest the middle of the process's own span.
        middle = min(points, key=lambda p: abs(p[0] - (points[0][0] + end) / 2))[1]
        end_mib = points[-1][1]
        out[name] = {
            "start_mib": round(start_mib, 1),
            "middle_mib": round(middle, 1),
            "end_mib": round(end_mib, 1),
            "growth_percent": round(100 * (end_mib - start_mib) / start_mib, 1)
            if start_mib
            else None,
            "second_half_percent": round(100 * (end_mib - middle) / middle, 1) if middle else None,
            "samples": [[round(t, 1), round(m, 1)] for t, m in points],
        }
    return out


def rss_table(growth: dict[str, dict[str, Any]]) -> str:
    """RSS per process: start, middle, end (MiB), growth over the run and its second half."""
    lines = [f"{'process':<28}{'start':>9}{'middle':>9}{'end':>9}{'growth':>9}{'2nd half':>10}"]
    for name, g in growth.items():
        lines.append(
            f"{name:<28}{g['start_mib']:>9.1f}{g['middle_mib']:>9.1f}{g['end_mib']:>9.1f}"
            f"{_percent(g['growth_percent']):>9}{_percent(g['second_half_percent']):>10}"
        )
    return "\n".join(lines)


def rss_bound(growth: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """RSS growth over a soak of engram's own processes (the 10 % bound), from `rss_growth`:
    together, and the one that grew most. Backends (caches warming) are not counted."""
    own = {
        name: g
        for name, g in growth.items()
        if not name.startswith("backend:") and g["growth_percent"] is not None
    }
    start = sum(g["start_mib"] for g in own.values())
    end = sum(g["end_mib"] for g in own.values())
    most = max(own, key=lambda name: own[name]["growth_percent"])
    return {
        "rss_growth_percent": round(100 * (end - start) / start, 1),
        "rss_most_grown": most,
        "rss_most_grown_percent": own[most]["growth_percent"],
    }


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def plot_rates(steps: list[dict[str, Any]], path: Path, *, target_ms: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    rates = [s["rate"] for s in steps]
    for group, color in (("search", "tab:blue"), ("write", "tab:orange"), ("read", "tab:green")):
        for q, style in (("p50", "--"), ("p99", "-")):
            values = [
                s["groups"].get(group, {}).get("latency_ms", {}).get(q, math.nan) for s in steps
            ]
            ax.plot(rates, values, style, marker="o", color=color, label=f"{group} {q}")
    ax.axhline(target_ms, color="red", linewidth=0.8, label=f"target {target_ms:.0f} ms")
    for s in steps:
        if s["errors"]:
            ax.annotate(f"{s['errors']} err", (s["rate"], target_ms), color="red", fontsize=8)
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_time(
    result: dict[str, Any],
    rss: dict[str, dict[str, Any]],
    path: Path,
    *,
    target_ms: float,
    title: str,
    window: float = 5.0,
) -> None:
    """p50/p99 per `window` seconds of search and writes over the run; below, each engram
    process's RSS relative to its first sample (backends' in grey), from `rss_growth`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets: dict[str, dict[int, list[float]]] = {g: defaultdict(list) for g in GROUPS}
    group_of = {op: g for g, ops in GROUPS.items() for op in ops}
    for due, op, latency, code, _ in result["records"]:
        if code == "OK":
            buckets[group_of[op]][int(due // window)].append(latency)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 1.5))
    for group, color in (("search", "tab:blue"), ("write", "tab:orange")):
        keys = sorted(buckets[group])
        xs = [k * window for k in keys]
        for q, style in (("p50", "--"), ("p99", "-")):
            ys = [percentile(buckets[group][k], 50 if q == "p50" else 99) for k in keys]
            ax.plot(xs, ys, style, marker=".", color=color, label=f"{group} {q}")
    errors = [row[0] for row in result["records"] if row[3] != "OK"]
    if errors:
        ax.plot(errors, [target_ms] * len(errors), "x", color="red", label="errors")
    fresh = [(f[0], f[1] * 1000) for f in result["freshness"] if f[1] is not None]
    if fresh:
        ax.plot(*zip(*fresh, strict=True), ".", color="tab:purple", markersize=3, label="freshness")
    ax.axhline(target_ms, color="red", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    for name, g in rss.items():
        base = g["start_mib"] or 1.0
        xs = [t for t, _ in g["samples"]]
        ys = [100 * (m - base) / base for _, m in g["samples"]]
        if name.startswith("backend:"):
            ax2.plot(xs, ys, color="tab:gray", linewidth=0.7)
        else:
            ax2.plot(xs, ys, label=name, linewidth=1.2)
    ax2.axhline(10, color="red", linewidth=0.8)
    ax2.set_ylabel("RSS growth %")
    handles, _ = ax2.get_legend_handles_labels()
    if handles:
        ax2.legend(fontsize=7, ncol=4)
    ax2.set_xlabel("seconds")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
