"""Faults under load: `bench/load.py --target real --rate R --fault NAME`.

Each fault acts on the running deployment while the open-loop generator sends at a fixed
rate, then reports what was lost (must be nothing) and how long recovery took:

* `indexer-kill`: SIGKILL of the indexer process at `--fault-at` seconds, started again
  `--fault-down` seconds later (default 5). No index entry may be lost (every write the
  ledger says was acknowledged is found by a lexical search of its token once the index has
  caught up), and freshness must be back under `--freshness-target-ms` within
  `--recovery-bound` seconds (default 30) of the restart.
* `nats-restart`: NATS stopped and started again on its port with its data (default 10 s
  down). No event lost: the same index check (an event that never reached the indexer is a
  write missing from the index), and the same freshness recovery.
* `opensearch-stop`: OpenSearch stopped for 30 s (default) and started again, engram left
  running. Searches keep answering (no search errors), answers from the vector index alone
  are counted as `degraded`; recovery = the last degraded answer after OpenSearch is back;
  no index entry lost once it is back (the indexer's retries fill the keyword index).
* `storage-replica-kill`: the deployment runs two storage replicas (`storage`, `storage-2`);
  every client of storage (workspace, indexer, search) has both addresses and balances
  round-robin over them. `storage` is SIGKILLed and started again 10 s later (default).
  No acknowledged write lost (the ledger's loss check), and the only errors are UNAVAILABLE.

Figures per fault (in result.json under the fixed run's `faults`, and in table.txt): the
times of the fault and of the recovery (seconds since the generator started), errors by code
while the fault lasted, freshness recovery, degraded answers, the index check, pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.client import AsyncClient, ClientTls, EngramError, Space, status_name

FAULTS = ("indexer-kill", "nats-restart", "opensearch-stop", "storage-replica-kill")
DEFAULT_DOWN = {
    "indexer-kill": 5.0,
    "nats-restart": 10.0,
    "opensearch-stop": 30.0,
    "storage-replica-kill": 10.0,
}
SECOND_STORAGE = "storage-2"
# Seconds a searched-for token may take to show up in the index check (after the run).
INDEX_CHECK_TIMEOUT = 90.0
INDEX_CHECK_CONCURRENCY = 8
# The generator's default wait for a freshness probe (runner.Harness.freshness_timeout).
FRESHNESS_TIMEOUT = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("faults (with --target real and --rate)")
    group.add_argument(
        "--fault",
        choices=FAULTS,
        action="append",
        default=[],
        help="inject this fault during the fixed-rate run (repeatable)",
    )
    group.add_argument(
        "--fault-at", type=float, default=10.0, help="seconds into the run when the fault starts"
    )
    group.add_argument(
        "--fault-down",
        type=float,
        default=0.0,
        help="seconds the fault lasts (0 = the fault's default: "
        + ", ".join(f"{k} {v:.0f}" for k, v in DEFAULT_DOWN.items())
        + ")",
    )
    group.add_argument(
        "--freshness-target-ms",
        type=float,
        default=2000.0,
        help="freshness (acknowledged -> found) counted as recovered",
    )
    group.add_argument(
        "--recovery-bound",
        type=float,
        default=30.0,
        help="seconds after the fault ends within which recovery must happen",
    )
    group.add_argument(
        "--index-check-timeout",
        type=float,
        default=INDEX_CHECK_TIMEOUT,
        help="seconds the index check waits for the last writes to be found",
    )


def build(args: argparse.Namespace) -> list[Outage]:
    """The faults the flags ask for; refuses combinations that cannot run."""
    if not args.fault:
        return []
    if args.target != "real":
        raise SystemExit(
            "--fault needs --target real: faults act on separate processes "
            "and backends (engram dev is one process)"
        )
    if not args.rate:
        raise SystemExit("--fault needs --rate: faults run during a fixed-rate run")
    built: list[Outage] = []
    for name in dict.fromkeys(args.fault):
        down = args.fault_down or DEFAULT_DOWN[name]
        built.append(
            Outage(
                name,
                at=args.fault_at,
                down=down,
                freshness_target=args.freshness_target_ms / 1000,
                recovery_bound=args.recovery_bound,
                index_check_timeout=args.index_check_timeout,
            )
        )
    return built


def storage_replicas(args: argparse.Namespace) -> int:
    """How many storage processes the deployment must run for these faults."""
    return 2 if "storage-replica-kill" in (args.fault or []) else 1


def add_storage_replica(plan: Any, free_ports: Any) -> None:
    """Adds `storage-2` to a cluster plan (deploy/local/cluster.py's Plan): the storage
    process again on its own ports, same backends; every process that was given the storage
    address gets both, which engram's channels balance round-robin."""
    first = plan.specs["storage"]
    grpc_port, metrics_port = free_ports(2)
    env = dict(first.env)
    for key, value in list(env.items()):
        if value == str(first.grpc_port):
            env[key] = str(grpc_port)
        elif value == str(first.metrics_port):
            env[key] = str(metrics_port)
    argv = [str(grpc_port) if a == str(first.grpc_port) else a for a in first.argv]
    argv = [str(metrics_port) if a == str(first.metrics_port) else a for a in argv]
    second = type(first)(first.component, argv, env, grpc_port, metrics_port)
    both = f"{first.address},{second.address}"
    for spec in plan.specs.values():
        for key, value in list(spec.env.items()):
            if value == first.address:
                spec.env[key] = both
    plan.specs[SECOND_STORAGE] = second


class Outage:
    """One fault on the run's timeline: `down()` at `at` s, `up()` at `at + down` s."""

    def __init__(
        self,
        name: str,
        *,
        at: float,
        down: float,
        freshness_target: float,
        recovery_bound: float,
        index_check_timeout: float,
    ) -> None:
        self.name = name
        self.at = at
        self.down_for = down
        self.freshness_target = freshness_target
        self.recovery_bound = recovery_bound
        self.index_check_timeout = index_check_timeout
        self.deployment: Any = None
        self.harness: Any = None
        self.events: dict[str, float] = {}  # what happened -> wall-clock time

    # --- the hooks the runner calls -------------------------------------------------------
    def attach(self, harness: Any) -> None:
        """The harness (ledger path, agents) for the index check."""
        self.harness = harness

    def start(self, deployment: Any) -> None:
        self.deployment = deployment
        self.events = {"run_started": time.time()}
        if self.name == "storage-replica-kill" and SECOND_STORAGE not in deployment.pids():
            raise RuntimeError(
                "storage-replica-kill needs two storage replicas: bench/load.py starts them "
                "when the flag is given (deployment `real`)"
            )

    def poll(self, elapsed: float) -> None:
        if "down" not in self.events and elapsed >= self.at:
            self.events["down"] = time.time()
            self._down()
            self.events["down_done"] = time.time()
        if "down" in self.events and "up" not in self.events and elapsed >= self.at + self.down_for:
            self._up()

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        if "down" in self.events and "up" not in self.events:
            self._up()  # the run ended first: restore the deployment for the next check
        result = summary.get("result") or {}
        origin = float(result.get("started_unix", self.events.get("run_started", 0.0)))

        def offset(key: str) -> float | None:
            return round(self.events[key] - origin, 3) if key in self.events else None

        figures: dict[str, Any] = {
            "fault": self.name,
            "down_at_s": offset("down"),
            "up_at_s": offset("up"),
            "back_at_s": offset("back"),
            "restore_seconds": round(self.events["back"] - self.events["up"], 3)
            if "back" in self.events
            else None,
        }
        up = offset("back")
        down = offset("down")
        records = result.get("records", [])
        if down is not None and up is not None:
            figures["errors_during_fault"] = _errors_between(records, down, up + 5.0)
        errors_by_code: dict[str, int] = defaultdict(int)
        for op in summary.get("per_rpc", {}).values():
            for code, n in op.get("error_codes", {}).items():
                errors_by_code[code] += n
        figures["errors_by_code"] = dict(errors_by_code)
        run_end = max((r[0] for r in records), default=None)
        figures["search_errors"] = {
            op: summary.get("per_rpc", {}).get(op, {}).get("error_codes", {})
            for op in ("search", "memory_search")
        }
        figures["freshness"] = _freshness_recovery(
            result.get("freshness", []),
            down,
            up,
            self.freshness_target,
            float(getattr(self.harness, "freshness_timeout", FRESHNESS_TIMEOUT)),
        )
        if self.name == "opensearch-stop":
            figures["degraded"] = _degraded(records, up, run_end)
        if self.name != "storage-replica-kill":
            figures["index"] = self._index_check()
            figures["indexer_dead_letters"] = self._dead_letters()
        figures["criteria"] = self._criteria(figures)
        figures["passed"] = all(figures["criteria"].values())
        return figures

    # --- the fault itself -------------------------------------------------------------------
    def _down(self) -> None:
        d = self.deployment
        if self.name == "indexer-kill":
            d.kill("indexer")
        elif self.name == "storage-replica-kill":
            d.kill("storage")
        elif self.name == "nats-restart":
            d.stop_backend("nats")
        elif self.name == "opensearch-stop":
            d.stop_backend("opensearch")

    def _up(self) -> None:
        self.events["up"] = time.time()
        d = self.deployment
        if self.name == "indexer-kill":
            d.start("indexer")
        elif self.name == "storage-replica-kill":
            d.start("storage")
        elif self.name == "nats-restart":
            d.start_backend("nats")
        elif self.name == "opensearch-stop":
            d.start_backend("opensearch")
        self.events["back"] = time.time()

    def _criteria(self, figures: dict[str, Any]) -> dict[str, bool]:
        errors = figures["errors_by_code"]
        checks: dict[str, bool] = {"fault_happened": figures["back_at_s"] is not None}
        if self.name == "storage-replica-kill":
            checks["only_unavailable_errors"] = set(errors) <= {"UNAVAILABLE"}
            # Errors only while a replica was down: a survivor that fails too (every call
            # UNAVAILABLE from the start) is not a replica fault survived.
            during = figures.get("errors_during_fault") or {}
            checks["no_errors_outside_the_fault"] = sum(errors.values()) == sum(during.values())
            return checks
        checks["no_index_entry_lost"] = figures["index"]["missing"] == 0
        recovery = figures["freshness"]["recovery_s"]
        if self.name in ("indexer-kill", "nats-restart"):
            checks["no_errors"] = not errors
            checks["freshness_recovered_within_bound"] = (
                recovery is not None
                and recovery <= self.recovery_bound
                and not figures["freshness"]["recovery_is_lower_bound"]
            )
        if self.name == "opensearch-stop":
            search_errors = sum(
                n
                for op in ("search", "memory_search")
                for n in figures.get("search_errors", {}).get(op, {}).values()
            )
            checks["searches_kept_answering"] = search_errors == 0
            checks["no_other_errors"] = sum(errors.values()) == search_errors
            degraded = figures["degraded"]
            checks["recovered_within_bound"] = (
                degraded["recovery_s"] is not None and degraded["recovery_s"] <= self.recovery_bound
            )
        return checks

    def _dead_letters(self) -> float | None:
        """engram_indexer_dead_letters_total of the indexer process (its metrics endpoint),
        events the indexer gave up on: each is an index entry missing until a reindex."""
        try:
            spec = self.deployment.cluster.plan.specs["indexer"]
            url = f"http://127.0.0.1:{spec.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
        except (OSError, KeyError, AttributeError):
            return None
        total = 0.0
        for line in text.splitlines():
            if line.startswith("engram_indexer_dead_letters_total"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    # --- no index entry lost --------------------------------------------------------------
    def _index_check(self) -> dict[str, Any]:
        if self.harness is None:
            return {"missing": math.nan, "why": "no harness attached"}
        return asyncio.run(
            index_check(
                self.deployment,
                read_ledger(Path(self.harness.ledger)),
                {a["sub"]: a for a in self.harness.agents},
                wait_seconds=self.index_check_timeout,
            )
        )


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _errors_between(records: list[list[Any]], start: float, end: float) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for due, _op, _latency, code, _degraded in records:
        if start <= due <= end and code != "OK":
            counts[code] += 1
    return dict(counts)


def _freshness_recovery(
    samples: list[list[Any]],
    down: float | None,
    up: float | None,
    target: float,
    timeout: float,
) -> dict[str, Any]:
    """Recovery = from the fault's end until the last probe that was over `target` was found
    (probes acknowledged during the fault wait for the index to catch up): after it, every
    probe was found within the target. A probe never found within the generator's
    `timeout` counts as found at the timeout, and the recovery is then a lower bound."""
    over = [s for s in samples if s[1] is None or s[1] > target]
    never = sum(1 for s in samples if s[1] is None)
    recovery = None
    if up is not None:
        ends = [s[0] + (timeout if s[1] is None else s[1]) - up for s in over]
        recovery = round(max([*ends, 0.0]), 3)
    before = sorted(s[1] for s in samples if s[1] is not None and down is not None and s[0] < down)
    found = sorted(s[1] for s in samples if s[1] is not None)
    return {
        "probes": len(samples),
        "target_s": target,
        "before_fault_p50_s": _quantile(before, 0.5),
        "before_fault_max_s": round(before[-1], 3) if before else None,
        "over_target": len(over),
        "never_found": never,
        "max_s": round(found[-1], 3) if found else None,
        "recovery_s": recovery,
        "recovery_is_lower_bound": bool(never),
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(len(values) * q))], 3)


def _degraded(records: list[list[Any]], up: float | None, run_end: float | None) -> dict[str, Any]:
    """Degraded answers (one index only) and the recovery: from the backend being back to
    the last degraded answer. Not observed (None) when the run ended less than 5 s after
    the backend was back: give the run a longer --duration."""
    degraded = [r for r in records if r[4]]
    last = max((r[0] for r in degraded), default=None)
    observed = up is not None and run_end is not None and run_end >= up + 5.0
    return {
        "answers": len(degraded),
        "first_at_s": min((r[0] for r in degraded), default=None),
        "last_at_s": last,
        "recovery_observed": observed,
        "recovery_s": round(max(0.0, (last or up) - up), 3) if observed and up else None,
    }


def _client(deployment: Any, service: str) -> AsyncClient:
    """A client of one of the deployment's services, over TLS when it speaks TLS. One attempt
    of at most 30 s per call (retries off): the check's own loop decides what to repeat."""
    tls = deployment.tls
    return AsyncClient(
        deployment.addresses[service],
        tls=False
        if tls is None
        else ClientTls(ca_file=tls.ca, cert_file=tls.cert, key_file=tls.key),
        retries=0,
        timeout=30,
    )


async def _pool(work: list[Any], act: Any) -> None:
    """`act` on every item of `work`, INDEX_CHECK_CONCURRENCY at a time."""
    queue = list(work)

    async def worker() -> None:
        while queue:
            await act(queue.pop())

    await asyncio.gather(*(worker() for _ in range(INDEX_CHECK_CONCURRENCY)))


@dataclass
class _IndexCheck:
    """The index check's clients, the tokens it expects and the documents it could not read."""

    storage: AsyncClient
    search: AsyncClient
    agents: dict[str, dict[str, Any]]
    by_doc: dict[tuple[str, str], set[str]]
    expected: list[tuple[str, str, str]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    callers: dict[tuple[str, str], AsyncClient] = field(default_factory=dict)

    def caller(self, client: AsyncClient, name: str, sub: str) -> AsyncClient:
        """`client` calling as agent `sub`, in its own space."""
        if (name, sub) not in self.callers:
            agent = self.agents[sub]
            space = Space(visibility="private", tenant=agent["tenant"], name=agent["space"])
            self.callers[(name, sub)] = client.as_caller(agent["token"], space=space)
        return self.callers[(name, sub)]

    async def read(self, key: tuple[str, str]) -> None:
        """Expects the document's ledger tokens that its current content holds."""
        sub, path = key
        try:
            document = await self.caller(self.storage, "storage", sub).read_document(path)
        except EngramError as error:
            self.unreadable.append(f"{sub}:{path} {status_name(error)}")
            return
        self.expected.extend((sub, path, t) for t in self.by_doc[key] if t in document.content)

    async def found(self, sub: str, path: str, token: str) -> bool:
        try:
            answer = await self.caller(self.search, "search", sub).search(
                token, limit=5, mode="lexical", path_prefix=path
            )
        except EngramError:
            return False
        return any(token in hit.content for hit in answer.results)

    async def missing_after(
        self, started: float, wait_seconds: float
    ) -> list[tuple[str, str, str]]:
        """Searches for the expected tokens, once a second, until every one is found or
        `wait_seconds` since `started`; returns those never found."""
        missing = list(self.expected)
        rounds = 0
        while missing and rounds < 1000:
            rounds += 1
            still: list[tuple[str, str, str]] = []

            async def probe(item: tuple[str, str, str], still: list[Any] = still) -> None:
                if not await self.found(*item):
                    still.append(item)

            await _pool(missing, probe)
            missing = still
            if not missing or time.monotonic() - started > wait_seconds:
                break
            await asyncio.sleep(1.0)
        return missing


async def index_check(
    deployment: Any,
    entries: list[dict[str, Any]],
    agents: dict[str, dict[str, Any]],
    *,
    wait_seconds: float = INDEX_CHECK_TIMEOUT,
) -> dict[str, Any]:
    """Every acknowledged write still in its document must be in the index: each document a
    write touched is read through StorageService; each ledger token its current content
    holds is searched for (lexical, the agent's space, the document's path) until found or
    `wait_seconds`. `entries`: the ledger's lines. Returns counts and the tokens never
    found."""
    acked = [e for e in entries if e.get("acked") and e.get("path")]
    by_doc: dict[tuple[str, str], set[str]] = defaultdict(set)
    for entry in acked:
        by_doc[(entry["sub"], entry["path"])].add(entry["token"])
    storage = _client(deployment, "storage")
    search = _client(deployment, "search")
    state = _IndexCheck(storage, search, agents, by_doc)
    started = time.monotonic()
    try:
        await _pool(list(by_doc), state.read)
        missing = await state.missing_after(started, wait_seconds)
    finally:
        await storage.close()
        await search.close()
    return {
        "documents": len(by_doc),
        "acknowledged_writes": len(acked),
        "tokens_checked": len(state.expected),
        "missing": len(missing),
        "missing_tokens": [":".join(m) for m in missing[:20]],
        "unreadable_documents": state.unreadable[:20],
        "seconds": round(time.monotonic() - started, 1),
    }


def table(faults: dict[str, dict[str, Any]]) -> str:
    """The faults' figures as text lines for table.txt."""
    lines = []
    for name, f in faults.items():
        fresh = f.get("freshness", {})
        index = f.get("index")
        parts = [
            f"fault {name}: down at {f['down_at_s']} s, restored at {f['back_at_s']} s "
            f"(restore took {f['restore_seconds']} s)",
            f"  errors by code: {f['errors_by_code'] or 'none'}; during the fault: "
            f"{f.get('errors_during_fault') or 'none'}",
            f"  freshness: {fresh.get('probes')} probes (before the fault: p50 "
            f"{fresh.get('before_fault_p50_s')} s, max {fresh.get('before_fault_max_s')} s), "
            f"{fresh.get('over_target')} over the {fresh.get('target_s')} s target, "
            f"{fresh.get('never_found')} never found, max {fresh.get('max_s')} s; back under "
            f"target {'at least ' if fresh.get('recovery_is_lower_bound') else ''}"
            f"{fresh.get('recovery_s')} s after the restore",
        ]
        if "degraded" in f:
            d = f["degraded"]
            recovered = (
                f"recovered {d['recovery_s']} s after restore"
                if d["recovery_observed"]
                else "recovery not observed (the run ended first: longer --duration)"
            )
            parts.append(
                f"  degraded answers: {d['answers']} (from {d['first_at_s']} s to "
                f"{d['last_at_s']} s), {recovered}"
            )
        if index is not None:
            parts.append(
                f"  index check: {index.get('tokens_checked')} acknowledged writes searched, "
                f"{index.get('missing')} missing; indexer dead letters (process lifetime): "
                f"{f.get('indexer_dead_letters')}"
            )
        parts.append(
            f"  {'PASS' if f['passed'] else 'FAIL'}: "
            + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in f["criteria"].items())
        )
        lines += parts
    return "\n".join(lines)
