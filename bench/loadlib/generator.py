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

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from engram.v1 import (
    search_pb2,
    search_pb2_grpc,
    space_pb2,
    workspace_pb2,
    workspace_pb2_grpc,
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
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.start = 0.0

    # --- channels and stubs ---------------------------------------------------------------
    def channel(self, service: str) -> grpc.aio.Channel:
        address = self.config["addresses"][service]
        if address not in self.channels:
            options = [("grpc.max_receive_message_length", 16 << 20)]
            tls = self.config.get("tls")
            if tls:
                credentials = grpc.ssl_channel_credentials(
                    Path(tls["ca"]).read_bytes(),
                    Path(tls["key"]).read_bytes() if tls.get("key") else None,
                    Path(tls["cert"]).read_bytes() if tls.get("cert") else None,
                )
                self.channels[address] = grpc.aio.secure_channel(address, credentials, options)
            else:
                self.channels[address] = grpc.aio.insecure_channel(address, options)
        return self.channels[address]

    def stubs(self) -> None:
        self.search = search_pb2_grpc.SearchServiceStub(self.channel("search"))
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(self.channel("workspace"))

    # --- operations -----------------------------------------------------------------------
    @staticmethod
    def space(agent: dict[str, Any]) -> space_pb2.SpaceRef:
        return space_pb2.SpaceRef(
            visibility=space_pb2.VISIBILITY_PRIVATE, tenant=agent["tenant"], name=agent["space"]
        )

    def write_line(self, entry: dict[str, Any]) -> None:
        self.ledger.write(json.dumps(entry) + "\n")

    async def call(self, op: str, agent: dict[str, Any], probe: bool) -> bool:
        """One request; returns whether the answer was degraded. Raises grpc errors."""
        metadata = (("authorization", f"Bearer {agent['token']}"),)
        timeout = self.config["timeout"]
        space = self.space(agent)
        if op == "search":
            answer = await self.search.Search(
                search_pb2.SearchRequest(
                    spaces=[space], query=self.words.query(self.rng), limit=10
                ),
                metadata=metadata,
                timeout=timeout,
            )
            return bool(answer.degraded)
        if op == "memory_search":
            found = await self.workspace.MemorySearch(
                workspace_pb2.MemorySearchRequest(
                    space=space, query=self.words.query(self.rng), limit=5
                ),
                metadata=metadata,
                timeout=timeout,
            )
            return bool(found.degraded)
        if op == "read":
            path = self.rng.choice(agent["reads"])
            await self.workspace.MemoryRead(
                workspace_pb2.MemoryReadRequest(space=space, path=path),
                metadata=metadata,
                timeout=timeout,
            )
            return False
        unique = token(self.rng)
        text = f"{unique} {self.words.sentence(self.rng)}"
        entry: dict[str, Any] = {"kind": op, "sub": agent["sub"], "token": unique}
        sent = time.monotonic() - self.start
        try:
            if op == "append":
                entry["path"] = ""
                written = await self.workspace.AppendDailyLog(
                    workspace_pb2.AppendDailyLogRequest(space=space, entry=text, session="load"),
                    metadata=metadata,
                    timeout=timeout,
                )
            else:
                entry["path"] = f"notes/load-{self.rng.randrange(REPLACE_SLOTS)}.md"
                written = await self.workspace.MemoryWrite(
                    workspace_pb2.MemoryWriteRequest(
                        space=space,
                        target=workspace_pb2.MEMORY_TARGET_PATH,
                        path=entry["path"],
                        content=f"# Load note\n\n{text}\n",
                        append=False,
                    ),
                    metadata=metadata,
                    timeout=timeout,
                )
        except grpc.aio.AioRpcError as error:
            entry.update(acked=False, code=error.code().name, sent=round(sent, 3))
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
        metadata = (("authorization", f"Bearer {agent['token']}"),)
        request = search_pb2.SearchRequest(
            spaces=[self.space(agent)],
            query=semantic or unique,
            limit=10 if semantic else 3,
            mode=search_pb2.SEARCH_MODE_SEMANTIC if semantic else search_pb2.SEARCH_MODE_LEXICAL,
        )
        deadline = acked + self.config["freshness_timeout"]
        found: float | None = None
        interval = POLL_INTERVAL

        def count_error(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, grpc.aio.AioRpcError):
                name = error.code().name
                self.poll_errors[name] = self.poll_errors.get(name, 0) + 1

        while time.monotonic() - self.start < deadline:
            left = deadline - (time.monotonic() - self.start)
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(grpc.aio.AioRpcError),
                    wait=wait_exponential_jitter(
                        initial=POLL_BACKOFF_INITIAL, max=POLL_BACKOFF_MAX, jitter=0.05
                    ),
                    stop=stop_after_delay(max(left, 0.0)),
                    before_sleep=count_error,
                    reraise=True,
                ):
                    with attempt:
                        self.polls += 1
                        answer = await self.search.Search(request, metadata=metadata, timeout=5)
            except grpc.aio.AioRpcError as error:
                name = error.code().name
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
        except grpc.aio.AioRpcError as error:
            code = error.code().name
            key = f"{op} {code}"
            if len(self.error_samples.setdefault(key, [])) < 3:
                self.error_samples[key].append(str(error.details()))
        finally:
            self.outstanding -= 1
        latency = (time.monotonic() - self.start - due) * 1000
        self.records.append((round(due, 4), op, round(latency, 3), code, degraded))

    # --- the open loop --------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        self.stubs()
        for channel in self.channels.values():
            await asyncio.wait_for(channel.channel_ready(), 30)
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
        for channel in self.channels.values():
            await channel.close()
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
