"""The open-loop generator, run in its own process:

    python -m loadlib.generator CONFIG.json      (cwd or PYTHONPATH: bench/)

Request i is due at `start + i / rate` and is sent then, however many earlier requests are
still outstanding (open loop: a slow server cannot slow the arrivals and hide its queue).
Its latency runs from that scheduled time to the answer, so a generator that falls behind
shows up in the latencies rather than hiding it (and its lag is reported). At most
`max_outstanding` requests are in flight; a request due while that many are outstanding is
not sent and counts as an error (`OVERFLOW`).

Each request is one operation of the mix, for a random agent of the population, on that
agent's workspace (the agent's own token): `search` (SearchService.Search, hybrid, the
agent's space), `memory_search` (WorkspaceService.MemorySearch), `append`
(WorkspaceService.AppendDailyLog to the agent's `load` session journal), `replace`
(WorkspaceService.MemoryWrite replacing one of a few `notes/load-<n>.md`), `read`
(WorkspaceService.MemoryRead of a corpus document).

Every write carries a unique token; each attempt goes to the ledger (JSON lines: kind, agent,
path, token, acknowledged or not, the version the server answered). Every `freshness_every`
seconds the next acknowledged write is also polled for by a lexical Search of its token
(at once, then 50 ms later, each miss waiting 1.25 times longer, at most 500 ms, up to
`freshness_timeout`): freshness = found - acknowledged, to within that interval. The growing
interval bounds what the probes add to the load when the index falls behind (at a fixed
50 ms, 20 probes 20 s behind send 400 searches a second, adding to what keeps it behind).
A poll that
fails (an error, not a miss) is retried with exponential backoff and jitter (from 100 ms up
to 2 s, tenacity), so probes of a failing server do not add a request every 50 ms each to
its load while it recovers. The polls are not part of the mix's figures.

The results file holds one row per request: scheduled offset (s), operation, latency (ms),
status code, degraded (search answered from one index only).

Every call goes through engram.client (one client per address, each agent calling with its
own token over that client's channel, connected before the first request is due) with the
client's retries off: a request is one attempt bounded by `timeout`, so an error is counted
as the server gave it (`status_name`: UNAVAILABLE, DEADLINE_EXCEEDED ...) rather than hidden
behind a retry, and a write goes to the ledger exactly once, acknowledged or not (a retried
append could land twice; a retried replace would blur which attempt the server took).
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import string
import sys
import time
from pathlib import Path
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from engram.client import (
    AsyncClient,
    ClientTls,
    EngramError,
    SearchResults,
    Space,
    WriteResult,
    status_name,
)
from loadlib.corpus import Words

OPS = ("search", "memory_search", "append", "replace", "read")
WRITES = ("append", "replace")
SEARCHES = ("search", "memory_search")
REPLACE_SLOTS = 4
POLL_INTERVAL = 0.05
POLL_GROWTH = 1.25
POLL_MAX_INTERVAL = 0.5
# A failing poll is retried after 0.1 s, 0.2 s, 0.4 s ... up to 2 s (plus jitter).
POLL_BACKOFF_INITIAL = 0.1
POLL_BACKOFF_MAX = 2.0
# A freshness poll's own deadline.
POLL_TIMEOUT = 5.0


def token(rng: random.Random) -> str:
    return "lt" + "".join(rng.choice(string.ascii_lowercase) for _ in range(12))


class Generator:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.rng = random.Random(config["seed"])
        self.words = Words(config["vocab_seed"])
        self.agents: list[dict[str, Any]] = config["agents"]
        mix = {op: float(config["mix"].get(op, 0)) for op in OPS}
        self.ops = [op for op in OPS if mix[op] > 0]
        self.weights = [mix[op] for op in self.ops]
        self.records: list[tuple[float, str, float, str, bool]] = []
        self.freshness: list[tuple[float, float | None, str, str]] = []
        # The same probes through the vector leg alone (semantic mode).
        self.vector_freshness: list[tuple[float, float | None, str, str]] = []
        self.lags: list[float] = []
        self.polls = 0
        self.poll_errors: dict[str, int] = {}
        self.error_samples: dict[str, list[str]] = {}
        self.pollers: set[asyncio.Task[None]] = set()
        self.outstanding = 0
        self.ledger = Path(config["ledger"]).open("a", encoding="utf-8")
        self.next_probe = 0.0
        self.clients: dict[str, AsyncClient] = {}
        self.callers: dict[tuple[str, str], AsyncClient] = {}
        self.start = 0.0

    # --- clients --------------------------------------------------------------------------
    def client(self, service: str) -> AsyncClient:
        """The client of `service`'s address (services at one address share it). Retries
        off and the request's deadline as each call's: see the module's docstring."""
        address = self.config["addresses"][service]
        if address not in self.clients:
            tls = self.config.get("tls")
            self.clients[address] = AsyncClient(
                address,
                tls=ClientTls(
                    ca_file=Path(tls["ca"]),
                    cert_file=Path(tls["cert"]) if tls.get("cert") else None,
                    key_file=Path(tls["key"]) if tls.get("key") else None,
                )
                if tls
                else False,
                retries=0,
                timeout=float(self.config["timeout"]),
            )
        return self.clients[address]

    def caller(self, service: str, agent: dict[str, Any]) -> AsyncClient:
        """`service`'s client calling as `agent` (its token), in the agent's space."""
        key = (service, agent["sub"])
        if key not in self.callers:
            self.callers[key] = self.client(service).as_caller(
                agent["token"], space=self.space(agent)
            )
        return self.callers[key]

    # --- operations -----------------------------------------------------------------------
    @staticmethod
    def space(agent: dict[str, Any]) -> Space:
        return Space(visibility="private", tenant=agent["tenant"], name=agent["space"])

    def write_line(self, entry: dict[str, Any]) -> None:
        self.ledger.write(json.dumps(entry) + "\n")

    async def call(self, op: str, agent: dict[str, Any], probe: bool) -> bool:
        """One request; returns whether the answer was degraded. Raises EngramError."""
        if op in SEARCHES:
            query = self.words.query(self.rng)
            found: SearchResults = await (
                self.caller("search", agent).search(query, limit=10)
                if op == "search"
                else self.caller("workspace", agent).memory_search(query, limit=5)
            )
            return found.degraded
        workspace = self.caller("workspace", agent)
        if op == "read":
            await workspace.memory_read(self.rng.choice(agent["reads"]))
            return False
        unique = token(self.rng)
        text = f"{unique} {self.words.sentence(self.rng)}"
        entry: dict[str, Any] = {"kind": op, "sub": agent["sub"], "token": unique}
        sent = time.monotonic() - self.start
        written: WriteResult
        try:
            if op == "append":
                entry["path"] = ""
                written = await workspace.append_daily_log(text, session="load")
            else:
                entry["path"] = f"notes/load-{self.rng.randrange(REPLACE_SLOTS)}.md"
                written = await workspace.memory_write(
                    f"# Load note\n\n{text}\n", target=entry["path"], append=False
                )
        except EngramError as error:
            entry.update(acked=False, code=status_name(error), sent=round(sent, 3))
            self.write_line(entry)
            raise
        acked = time.monotonic() - self.start
        entry.update(
            acked=True,
            path=written.path,
            version=int(written.version),
            sent=round(sent, 3),
            at=round(acked, 3),
        )
        self.write_line(entry)
        if probe:
            # Each leg on its own: the unique token by BM25, the entry's text by its vector.
            for poll in (
                self.poll_fresh(agent, unique, acked),
                self.poll_fresh(agent, unique, acked, semantic=text),
            ):
                poller = asyncio.get_running_loop().create_task(poll)
                self.pollers.add(poller)
                poller.add_done_callback(self.pollers.discard)
        return False

    async def poll_fresh(
        self, agent: dict[str, Any], unique: str, acked: float, *, semantic: str = ""
    ) -> None:
        """Lexical searches for `unique` (or, with `semantic`, semantic searches for that
        text, the written entry's) until a hit holds `unique` or freshness_timeout."""
        searcher = self.caller("search", agent).with_options(timeout=POLL_TIMEOUT)
        query = semantic or unique
        limit = 10 if semantic else 3
        mode = "semantic" if semantic else "lexical"
        deadline = acked + self.config["freshness_timeout"]
        found: float | None = None
        interval = POLL_INTERVAL

        def count_error(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, EngramError):
                name = status_name(error)
                self.poll_errors[name] = self.poll_errors.get(name, 0) + 1

        while time.monotonic() - self.start < deadline:
            left = deadline - (time.monotonic() - self.start)
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(EngramError),
                    wait=wait_exponential_jitter(
                        initial=POLL_BACKOFF_INITIAL, max=POLL_BACKOFF_MAX, jitter=0.05
                    ),
                    stop=stop_after_delay(max(left, 0.0)),
                    before_sleep=count_error,
                    reraise=True,
                ):
                    with attempt:
                        self.polls += 1
                        answer = await searcher.search(query, limit=limit, mode=mode)
            except EngramError as error:
                name = status_name(error)
                self.poll_errors[name] = self.poll_errors.get(name, 0) + 1
                break
            if any(unique in r.content for r in answer.results):
                found = time.monotonic() - self.start - acked
                break
            await asyncio.sleep(interval)
            interval = min(interval * POLL_GROWTH, POLL_MAX_INTERVAL)
        leg = self.vector_freshness if semantic else self.freshness
        leg.append((round(acked, 3), found, unique, agent["sub"]))

    async def one(
        self, index: int, due: float, op: str, agent: dict[str, Any], probe: bool
    ) -> None:
        code = "OK"
        degraded = False
        try:
            degraded = await self.call(op, agent, probe)
        except EngramError as error:
            code = status_name(error)
            key = f"{op} {code}"
            if len(self.error_samples.setdefault(key, [])) < 3:
                self.error_samples[key].append(error.message)
        finally:
            self.outstanding -= 1
        latency = (time.monotonic() - self.start - due) * 1000
        self.records.append((round(due, 4), op, round(latency, 3), code, degraded))

    # --- the open loop --------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        for service in ("search", "workspace"):
            self.client(service)
        for client in self.clients.values():
            await client.wait_ready(30)
        rate = float(self.config["rate"])
        duration = float(self.config["duration"])
        limit = int(self.config["max_outstanding"])
        every = float(self.config["freshness_every"])
        total = int(rate * duration)
        tasks: set[asyncio.Task[None]] = set()
        self.start = time.monotonic()
        started_unix = time.time()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for index in range(total):
            due = index / rate
            delay = due - (time.monotonic() - self.start)
            if delay > 0:
                await asyncio.sleep(delay)
            self.lags.append(max(0.0, -delay) * 1000)
            op = self.rng.choices(self.ops, self.weights)[0]
            agent = self.rng.choice(self.agents)
            if self.outstanding >= limit:
                self.records.append((round(due, 4), op, 0.0, "OVERFLOW", False))
                continue
            probe = op in WRITES and every > 0 and due >= self.next_probe
            if probe:
                self.next_probe = due + every
            self.outstanding += 1
            task = asyncio.get_running_loop().create_task(self.one(index, due, op, agent, probe))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        # Requests in flight get their timeout; freshness polls theirs.
        if tasks:
            await asyncio.wait(set(tasks), timeout=float(self.config["timeout"]) + 5)
        if self.pollers:
            await asyncio.wait(
                set(self.pollers), timeout=float(self.config["freshness_timeout"]) + 5
            )
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        self.ledger.close()
        for client in self.clients.values():
            await client.close()
        lags = sorted(self.lags)
        return {
            "started_unix": started_unix,
            "rate": rate,
            "duration": duration,
            "scheduled": total,
            "elapsed": time.monotonic() - self.start,
            "records": self.records,
            "freshness": self.freshness,
            "vector_freshness": self.vector_freshness,
            "freshness_polls": self.polls,
            "freshness_poll_errors": self.poll_errors,
            "error_samples": self.error_samples,
            "generator_cpu_seconds": (cpu1.ru_utime + cpu1.ru_stime)
            - (cpu0.ru_utime + cpu0.ru_stime),
            "generator_lag_ms": {
                "p50": lags[len(lags) // 2] if lags else 0.0,
                "p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0,
                "max": lags[-1] if lags else 0.0,
            },
        }


async def main_async(config: dict[str, Any]) -> dict[str, Any]:
    return await Generator(config).run()


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    result = asyncio.run(main_async(config))
    Path(config["output"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
