"""The typed client over two `engram serve storage` replicas on one FerretDB, balanced
round-robin; one replica is SIGKILLed while eight writers keep writing.

What must hold: both replicas serve calls before the kill; the writers go on through the
survivor; every write the client acknowledged is readable with its content afterwards; the
only failures a caller sees are UNAVAILABLE ones, and only for unconditional appends (the
client never repeats those); replaces and conditional appends are retried to success; the
restarted replica is balanced to again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engram.client import EngramClient, Space
from engram.domain.errors import EngramError, EtagMismatch, Unavailable
from tests.support.backends import RealBackends
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

SPACE = Space(name="round-robin")
WRITERS = 8
ACKED_BEFORE_KILL = 120
ACKED_AFTER_KILL = 120
MAX_WRITES_PER_WRITER = 5_000


@dataclass
class Replica:
    """One `engram serve storage` process; its access log counts the writes it served."""

    port: int
    log: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "engram", "serve", "storage", "--port", str(self.port)]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=subprocess.DEVNULL, stderr=log
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def writes_served(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return sum(1 for line in text.splitlines() if "WriteDocument" in line)


@dataclass
class Ledger:
    """What the writers saw: acknowledged writes (path -> sha256 of the content it must
    have), the failures by error class, and unconditional appends left undecided."""

    acked: dict[str, str] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    undecided_appends: int = 0

    def fail(self, error: EngramError) -> None:
        name = type(error).__name__
        self.failures[name] = self.failures.get(name, 0) + 1


@pytest.fixture
def replicas(tmp_path: Path, real_backends: RealBackends) -> Iterator[tuple[Replica, Replica]]:
    env = {
        **os.environ,
        "ENGRAM_MONGO_URI": real_backends.url("mongo"),
        "ENGRAM_MONGO_DB": f"rr_{uuid.uuid4().hex[:10]}",
        "ENGRAM_NATS_URL": real_backends.url("nats"),
        "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "true",
    }
    pair = (
        Replica(_free_port(), tmp_path / "storage-a.log", env),
        Replica(_free_port(), tmp_path / "storage-b.log", env),
    )
    try:
        for replica in pair:
            replica.start()
        yield pair
    finally:
        for replica in pair:
            replica.kill()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def _write_one(client: EngramClient, ledger: Ledger, worker: int, i: int) -> None:
    """One write of three kinds in turn: a replace (retried), a create-only append
    (retried: conditional) and an unconditional append (never retried)."""
    kind = i % 3
    try:
        if kind == 0:
            path, content = f"replace/{worker}.md", f"replace {worker} {i}"
            written = await client.write_document(path, content)
            ledger.acked[path] = written.document.sha256
            assert written.document.sha256 == _sha256(content)
        elif kind == 1:
            path, content = f"created/{worker}-{i:05d}.md", f"created {worker} {i}"
            written = await client.write_document(path, content, append=True, create_only=True)
            ledger.acked[path] = written.document.sha256
        else:
            path = f"appended/{worker}-{i:05d}.md"
            written = await client.write_document(path, f"appended {worker} {i}", append=True)
            ledger.acked[path] = written.document.sha256
    except EtagMismatch as mismatch:
        # A create-only append whose first attempt landed unseen: the repeat finds it.
        assert kind == 1 and mismatch.current_sha256 == _sha256(f"created {worker} {i}")
        ledger.acked[f"created/{worker}-{i:05d}.md"] = mismatch.current_sha256
    except Unavailable as unavailable:
        ledger.fail(unavailable)
        if kind == 2:
            ledger.undecided_appends += 1
    except EngramError as error:
        ledger.fail(error)


@pytest.mark.timeout(300)
async def test_killing_one_of_two_replicas_loses_no_acknowledged_write(
    replicas: tuple[Replica, Replica], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="engram.client")
    first, second = replicas
    addresses = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
    ledger = Ledger()
    killed = asyncio.Event()
    acked_at_kill = 0
    enough_before, enough_after = asyncio.Event(), asyncio.Event()
    stop = asyncio.Event()
    async with EngramClient(
        addresses, token=mint("ann", "acme", "member"), space=SPACE, retries=6, timeout=10
    ) as client:
        # Both replicas up before the load starts (a read retried until each answers).
        async with asyncio.timeout(60):
            for address in addresses:
                async with EngramClient(address, token=mint("ann", "acme"), retries=20) as one:
                    await one.list_documents(space=SPACE)

        async def writer(worker: int) -> None:
            for i in range(MAX_WRITES_PER_WRITER):
                if stop.is_set():
                    return
                await _write_one(client, ledger, worker, i)
                if len(ledger.acked) >= ACKED_BEFORE_KILL:
                    enough_before.set()
                if killed.is_set() and len(ledger.acked) >= acked_at_kill + ACKED_AFTER_KILL:
                    enough_after.set()

        writers = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
        try:
            async with asyncio.timeout(120):
                await enough_before.wait()
                served_before = (first.writes_served(), second.writes_served())
                acked_at_kill = len(ledger.acked)
                await asyncio.to_thread(first.kill)
                killed.set()
                await enough_after.wait()
        finally:
            stop.set()
            await asyncio.gather(*writers)

        print(
            f"round-robin: writes served before the kill {served_before}, "
            f"{acked_at_kill} acknowledged then, {len(ledger.acked)} in all, "
            f"failures {ledger.failures}, undecided appends {ledger.undecided_appends}, "
            f"attempts retried {sum(1 for r in caplog.records if r.name == 'engram.client')}"
        )
        assert all(served > 0 for served in served_before), (
            f"round-robin: both replicas served writes before the kill {served_before}"
        )
        assert set(ledger.failures) <= {"Unavailable"}, ledger.failures
        assert ledger.failures.get("Unavailable", 0) == ledger.undecided_appends, (
            "only unconditional appends may fail; replaces and conditional appends are retried"
        )

        lost = []
        for path, sha256 in ledger.acked.items():
            document = await client.read_document(path)
            if document.sha256 != sha256:
                lost.append(path)
        assert not lost, f"{len(lost)} of {len(ledger.acked)} acknowledged writes lost"

        # The restarted replica is balanced to again once its connection is back.
        first.start()
        served_after_restart = first.writes_served()
        async with asyncio.timeout(60):
            i = 0
            while first.writes_served() == served_after_restart:
                await client.write_document(f"after/{i:04d}.md", f"after restart {i}")
                i += 1
                await asyncio.sleep(0.05)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
