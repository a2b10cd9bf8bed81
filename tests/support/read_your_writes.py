"""The read-your-writes scenario, shared by `engram dev` and the real-backend deployment:
write-then-search pairs where every search carries the position its write answered and
must find that write on its first and only attempt."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from engram.client import AsyncClient, IndexPosition, SearchResults, Space

# What these tests check is that a search answers only once its write is indexed, not how
# fast: on a shared, loaded 2-core machine an index can take seconds to apply a write or to
# answer, so the servers get generous waits and backend deadlines (timing is bench/'s).
PATIENT_SEARCH = {"search_max_wait_seconds": 60.0, "search_backend_timeout_seconds": 10.0}


@dataclass
class PairsReport:
    pairs: int
    found_first_time: int
    missed: list[str]
    waited_ms: list[int]
    seconds: float

    def wait_summary(self) -> str:
        """The server-reported waits, nearest-rank p50 / p95 / max, in ms."""
        ordered = sorted(self.waited_ms)

        def rank(q: float) -> int:
            return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

        return f"p50 {rank(0.5)} / p95 {rank(0.95)} / max {ordered[-1]} ms"


def _body(token: str) -> str:
    return f"Run note {token}: the agent deployed the billing service and noted the retries.\n"


async def write_then_search_pairs(
    storage: AsyncClient,
    search: AsyncClient,
    ref: Space,
    *,
    pairs: int,
    mode: str = "hybrid",
) -> PairsReport:
    """`pairs` writes, each followed at once by one search for a token only that write
    holds, carrying the write's position. The writes cycle through four kinds: a new
    document, an append to a growing log, a replace of one shared document, and a delete
    then re-create of one path (a new document id, its version back at 1)."""
    run = uuid.uuid4().hex[:8]
    missed: list[str] = []
    waited: list[int] = []
    started = time.perf_counter()
    patient = search.with_options(timeout=90)
    for i in range(pairs):
        token = f"tok{run}x{i:04d}"
        kind = i % 4
        append = False
        if kind == 0:
            path = f"ryw/new-{i:04d}.md"
        elif kind == 1:
            path = "ryw/log.md"
            append = True
        elif kind == 2:
            path = "ryw/shared.md"
        else:
            path = "ryw/cycle.md"
            if i > 3:
                await storage.delete_document(path, space=ref)
        written = await storage.write_document(path, _body(token), append=append, space=ref)
        position = written.position
        assert position is not None
        assert (position.path, position.version) == (path, written.document.version)
        answer = await patient.search(
            token, spaces=[ref], limit=5, mode=mode, min_positions=[position]
        )
        waited.append(answer.waited_ms)
        found = any(r.path == path and token in r.content for r in answer.results)
        if not found or answer.degraded:
            missed.append(f"{i} {path}: found={found} degraded={list(answer.degraded_reasons)}")
        if (i + 1) % 25 == 0:
            elapsed = time.perf_counter() - started
            print(f"  {i + 1} pairs, {elapsed:.1f} s, {len(missed)} missed", flush=True)
    return PairsReport(
        pairs=pairs,
        found_first_time=pairs - len(missed),
        missed=missed,
        waited_ms=waited,
        seconds=time.perf_counter() - started,
    )


async def several_writes_one_search(
    storage: AsyncClient, search: AsyncClient, ref: Space
) -> SearchResults:
    """Five writes, then one search carrying all five positions (one of them twice, an
    older version of the same document): every write is found."""
    run = uuid.uuid4().hex[:8]
    positions: list[IndexPosition] = []
    for i in range(5):
        body = f"Batch {run} item {i}: the agent filed finding {run}f{i} about quota alarms.\n"
        written = await storage.write_document(f"batch/{run}-{i}.md", body, space=ref)
        assert written.position is not None
        positions.append(written.position)
    again = await storage.write_document(
        f"batch/{run}-0.md",
        f"Batch {run} item 0 again: quota alarms {run}f0 resolved.\n",
        space=ref,
    )
    assert again.position is not None
    positions.append(again.position)
    answer = await search.search(
        f"Batch {run} quota alarms",
        spaces=[ref],
        limit=10,
        mode="lexical",
        min_positions=positions,
    )
    found = {r.path for r in answer.results}
    assert found >= {f"batch/{run}-{i}.md" for i in range(5)}, found
    assert any(f"{run}f0 resolved" in r.content for r in answer.results)
    return answer
