"""Runs `engram ARGS...` with timers around the steps of a write's quota charge and a PyMongo
command listener, for bench/quota_hop_bench.py.

    QUOTA_HOP_PROBE_OUT=/tmp/x.json python bench/quota_hop_probe.py serve quota

Timers (milliseconds per call, as the process sees them): the storage handler of a write,
its charge (over gRPC in the remote topology, in process otherwise), its document save;
the QuotaService Charge handler, the authentication of its caller, the ledger's apply.
MongoDB commands are counted with their round-trip time, by "command collection". SIGUSR2
clears everything gathered; SIGUSR1 writes it as JSON to $QUOTA_HOP_PROBE_OUT (atomically).
A benchmark helper, not part of engram.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import runpy
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pymongo import monitoring

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ["QUOTA_HOP_PROBE_OUT"])

TIMERS: dict[str, list[float]] = collections.defaultdict(list)
# "command collection" -> [count, total ms]
COMMANDS: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
_STARTED: dict[tuple[Any, int], str] = {}
LAG_EVERY = 0.005
_LAG_TASKS: set[asyncio.Task[None]] = set()


class Commands(monitoring.CommandListener):
    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        label = f"{event.command_name} {target if isinstance(target, str) else ''}".strip()
        _STARTED[(event.connection_id, event.request_id)] = label

    def _ended(self, event: Any) -> None:
        label = _STARTED.pop((event.connection_id, event.request_id), None)
        if label is not None:
            entry = COMMANDS[label]
            entry[0] += 1
            entry[1] += event.duration_micros / 1000

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._ended(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._ended(event)


async def _sample_lag() -> None:
    """How late a LAG_EVERY sleep wakes: the time the event loop was busy with other work."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(LAG_EVERY)
        TIMERS["event loop lag (5 ms sleep overshoot)"].append(
            (loop.time() - started - LAG_EVERY) * 1000
        )


def _watch_loop() -> None:
    if not _LAG_TASKS:
        _LAG_TASKS.add(asyncio.get_running_loop().create_task(_sample_lag()))


def timed(owner: type, name: str, label: str) -> None:
    """Replaces the coroutine method `owner.name` by one that records its wall time."""
    original: Callable[..., Awaitable[Any]] = getattr(owner, name)

    @functools.wraps(original)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        _watch_loop()
        started = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            TIMERS[label].append((time.perf_counter() - started) * 1000)

    setattr(owner, name, wrapper)


def install() -> None:
    from engram.authz.tokens import TokenAuthenticator
    from engram.quota.client import GrpcQuotaGate
    from engram.quota.mongo_ledger import MongoUsageLedger
    from engram.quota.service import QuotaService
    from engram.quota.servicer import QuotaServicer
    from engram.storage.mongo.documents import MongoDocuments
    from engram.storage.servicer import StorageServicer

    timed(StorageServicer, "WriteDocument", "storage: WriteDocument handler")
    timed(MongoDocuments, "save", "storage: document save")
    timed(GrpcQuotaGate, "charge", "storage: charge (Charge RPC, client side)")
    timed(QuotaService, "charge", "storage: charge (in process)")
    timed(QuotaServicer, "Charge", "quota: Charge handler")
    timed(TokenAuthenticator, "authenticate", "auth: caller's token")
    timed(MongoUsageLedger, "apply", "ledger: apply")


def dump(*_: Any) -> None:
    partial = OUT.with_suffix(".tmp")
    partial.write_text(json.dumps({"timers": TIMERS, "commands": COMMANDS}))
    partial.replace(OUT)


def clear(*_: Any) -> None:
    TIMERS.clear()
    COMMANDS.clear()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "services"))
    monitoring.register(Commands())
    install()
    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, clear)
    sys.argv = ["engram", *sys.argv[1:]]
    runpy.run_module("engram", run_name="__main__")
