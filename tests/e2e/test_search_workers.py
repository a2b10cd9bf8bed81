"""`engram serve search --workers 2` as deployed: two worker processes answer on one port,
the parent serves their metrics merged and replaces a worker that dies, and SIGTERM drains
calls in flight before the processes exit.

Runs on the session's OpenSearch and MongoDB (tokens, index progress) from deploy/local and
the shared embedded vector directory (ENGRAM_VECTOR_DIR), which several processes may read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from engram.client import AsyncClient, IndexPosition, SearchResults, Space, Unavailable
from engram.domain.chunking import build_chunks
from engram.domain.spaces import SpaceRef, Visibility
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from tests.support.backends import RealBackends
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend, pytest.mark.timeout(600)]

NOTES = SpaceRef(Visibility.PROJECT, "acme", "notes", project="p1")
DOCS = {
    "incidents/build.md": "Build 812 failed with ERR_4021 after the nightly upgrade.",
    "pets/rex.md": "My dog loves to chase tennis balls in the park every morning.",
}
# Each worker loads the query model: ~70 s to serve at load average 25 here. The test's
# budget: the session's backends, a start, a replacement and the drain.
START_SECONDS = 150.0
WORKER_CALLS = re.compile(r'^engram_worker_calls\{pid="(\d+)"\} ([0-9.e+]+)$', re.M)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - 127.0.0.1
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return 0, ""


def children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def survivors(pids: set[int], grace: float) -> dict[int, bytes]:
    """The processes of `pids` still alive after `grace` seconds, with their command lines.
    A child that exits a moment after its parent (a worker's last exit, or a
    multiprocessing helper reading its EOF) is gone within the grace; one that stays is not."""
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {}
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(OSError):
                left[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()[:120]
    return left


@dataclass
class Workers:
    process: subprocess.Popen[bytes]
    port: int
    metrics: str
    log: Path

    def calls_by_pid(self) -> dict[int, float]:
        status, text = http_get(f"{self.metrics}/metrics")
        assert status == 200, status
        return {int(pid): float(value) for pid, value in WORKER_CALLS.findall(text)}

    def ready(self) -> bool:
        return http_get(f"{self.metrics}/readyz")[0] == 200

    async def wait_ready(self, deadline: float) -> None:
        while not self.ready():
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the workers did not become ready"
            await asyncio.sleep(0.5)


TOKEN = mint("ann", tenant="acme", role="viewer")


async def search_once(
    port: int, *, min_positions: Sequence[IndexPosition] = (), max_wait_ms: int = 0
) -> SearchResults:
    """One search for ERR_4021 in notes, on a connection of its own (so the kernel may pick
    either worker): channels of one process otherwise share a connection to the same
    address (gRPC's global subchannel pool). No retries: each call is one attempt."""
    own = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=own) as channel:
        client = AsyncClient(
            channel=channel,
            token=TOKEN,
            space=Space(visibility="project", project="p1", name="notes"),
            retries=0,
        )
        return await client.search(
            "ERR_4021 build", limit=3, min_positions=min_positions, max_wait_ms=max_wait_ms
        )


async def populate(url: str, alias: str, vector_dir: Path) -> None:
    keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0)
    vector = NumpyVectorIndex(vector_dir)
    embedder = LocalOnnxEmbedder()
    await keyword.open()
    await vector.open()
    try:
        await vector.ensure_collection(embedder.model)
        await vector.activate(embedder.model.model_id)
        for number, (path, content) in enumerate(DOCS.items()):
            chunks = build_chunks(
                space_id=NOTES.id,
                tenant=NOTES.tenant,
                path=path,
                document_id=f"doc-{number}",
                version=1,
                content=content,
            )
            vectors = await embedder.embed_documents([c.content for c in chunks])
            await keyword.replace_chunks(NOTES.id, path, chunks)
            await vector.replace_chunks(embedder.model.model_id, NOTES.id, path, chunks, vectors)
    finally:
        await keyword.close()
        await vector.close()
        embedder.close()


@pytest.fixture
async def backends_env(
    real_backends: RealBackends, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    alias = f"engram-workers-{uuid.uuid4().hex[:10]}"
    url = real_backends.url("opensearch")
    vector_dir = tmp_path / "vectors"
    await populate(url, alias, vector_dir)
    yield {
        "ENGRAM_OPENSEARCH_URL": url,
        "ENGRAM_OPENSEARCH_INDEX": alias,
        "ENGRAM_OPENSEARCH_REPLICAS": "0",
        "ENGRAM_MONGO_URI": real_backends.url("mongo"),
        "ENGRAM_MONGO_DB": f"engram_test_{uuid.uuid4().hex[:12]}",
        "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
        "ENGRAM_VECTOR_DIR": str(vector_dir),
        "ENGRAM_ACCESS_LOG": "false",
    }
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=f"{alias}-*", ignore_unavailable=True)
        await client.indices.delete_index_template(name=f"{alias}-template", ignore=[404])
    finally:
        await client.close()


def launch(env: dict[str, str], port: int, metrics_port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "engram", "serve", "search", "--workers", "2"]
            + ["--port", str(port), "--host", "127.0.0.1"],
            env={
                **os.environ,
                **env,
                "ENGRAM_METRICS_PORT": str(metrics_port),
                "ENGRAM_METRICS_HOST": "127.0.0.1",
            },
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture
async def workers(backends_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Workers]:
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    process = launch(backends_env, port, metrics_port, log)
    running = Workers(process, port, f"http://127.0.0.1:{metrics_port}", log)
    try:
        await running.wait_ready(time.monotonic() + START_SECONDS)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def test_two_workers_answer_a_dead_one_is_replaced_and_sigterm_drains(
    workers: Workers,
) -> None:
    # One start for the three phases: each start loads the query model in every worker.
    parent = workers.process.pid

    # 1. Both workers answer: one series each, each a child process of the command.
    for _ in range(40):
        response = await search_once(workers.port)
        assert response.results[0].path == "incidents/build.md"
    calls = workers.calls_by_pid()
    assert len(calls) == 2, calls
    assert set(calls) <= children(parent) and parent not in calls
    assert all(count > 0 for count in calls.values()), calls
    assert sum(calls.values()) == 40

    # 2. A worker killed is replaced by a new one, and the command keeps serving.
    victim = min(calls)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + START_SECONDS
    while set(workers.calls_by_pid()) == set(calls) or not workers.ready():
        assert workers.process.poll() is None, "the command ended with its worker"
        assert time.monotonic() < deadline, "the dead worker was not replaced"
        await asyncio.sleep(0.5)
    replaced = workers.calls_by_pid()
    assert victim not in replaced and len(replaced) == 2, replaced
    for _ in range(10):
        response = await search_once(workers.port)
        assert response.results[0].path == "incidents/build.md"

    # 3. SIGTERM drains: calls in flight on both workers answer, then every process exits.
    pids = set(replaced) | children(parent)
    # Each call waits for a write no index will ever reach: it answers, degraded, after
    # max_wait_ms - long after the SIGTERM below.
    behind = IndexPosition(space_id=NOTES.id, path="never.md", document_id="never", version=1)
    before = workers.calls_by_pid()
    in_flight: list[asyncio.Task[SearchResults]] = []
    # New connections until each worker holds a call (the kernel picks by connection).
    while not all(count > before[pid] for pid, count in workers.calls_by_pid().items()):
        assert len(in_flight) < 40, "the calls all went to one worker"
        in_flight += [
            asyncio.create_task(search_once(workers.port, min_positions=[behind], max_wait_ms=5000))
            for _ in range(2)
        ]
        await asyncio.sleep(0.2)
    workers.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()

    answers = await asyncio.gather(*in_flight)
    assert all(a.degraded and a.results for a in answers), "a call in flight was cut off"
    assert time.monotonic() - signalled > 2.0, "the calls did not outlive the signal"
    assert await asyncio.to_thread(workers.process.wait, 30) == 0
    left = await asyncio.to_thread(survivors, pids, 10.0)
    assert not left, f"a worker outlived the command: {left}"
    with pytest.raises(Unavailable):
        await search_once(workers.port)
