"""Document events on real NATS JetStream, through the durable outbox.

Covers: every write/delete publishes one event with Nats-Msg-Id = event_id; a NATS outage
during a burst loses nothing (exactly N events after restart); SIGKILL of the storage
process mid-burst loses no acknowledged write and no event.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from engram.client import AsyncClient, EngramError, Space
from engram.v1 import events_pb2
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

STREAM = "ENGRAM_DOCS"
NOTES = Space(name="notes")


async def stream_events(
    nats_url: str, *, expect: int, within: float
) -> list[tuple[events_pb2.DocumentEvent, str]]:
    """Every event in the stream (with its Nats-Msg-Id), once at least `expect` are there."""
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        deadline = time.monotonic() + within
        while True:
            try:
                info = await js.stream_info(STREAM)
                count = info.state.messages
            except nats.js.errors.NotFoundError:
                count = 0
            if count >= expect or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        if count == 0:
            return []
        subscription = await js.pull_subscribe(
            "engram.docs.>",
            durable=None,
            stream=STREAM,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
        events: list[tuple[events_pb2.DocumentEvent, str]] = []
        while len(events) < count:
            for message in await subscription.fetch(min(500, count - len(events)), timeout=5):
                events.append(
                    (
                        events_pb2.DocumentEvent.FromString(message.data),
                        (message.headers or {}).get("Nats-Msg-Id", ""),
                    )
                )
                await message.ack()
        await subscription.unsubscribe()
        return events
    finally:
        await client.close()


async def purge_stream(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        try:
            await client.jetstream().purge_stream(STREAM)
        except nats.js.errors.NotFoundError:
            pass
    finally:
        await client.close()


@pytest.fixture
async def nats_url(real_backends: RealBackends) -> AsyncIterator[str]:
    url = real_backends.url("nats")
    await purge_stream(url)
    yield url


async def test_each_change_publishes_one_event(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    from engram.app.production import storage_on_mongo
    from engram.authz.enforcement import FixedPrincipalAuthenticator
    from engram.domain.principals import LOCAL_ADMIN

    settings = server_settings(
        tmp_path,
        mongo_uri=real_backends.url("mongo"),
        nats_url=nats_url,
        mongo_db=f"events_{uuid.uuid4().hex[:10]}",
    )
    async with storage_on_mongo(
        settings, authenticator=FixedPrincipalAuthenticator(LOCAL_ADMIN)
    ) as server:
        async with AsyncClient(f"127.0.0.1:{server.port}", space=NOTES) as client:
            first = await client.write_document("MEMORY.md", "one")
            await client.write_document("MEMORY.md", "two")
            await client.delete_document("MEMORY.md")
    events = await stream_events(nats_url, expect=3, within=20)
    assert [(e.op, e.version) for e, _ in events] == [
        (events_pb2.DOCUMENT_OP_UPSERT, 1),
        (events_pb2.DOCUMENT_OP_UPSERT, 2),
        (events_pb2.DOCUMENT_OP_DELETE, 2),
    ]
    for event, message_id in events:
        assert message_id == event.event_id
        assert event.space_id == "v1:private:local::::notes" and event.path == "MEMORY.md"
        assert event.document_id == first.document.document_id
        assert event.space.tenant == "local"


# 500 writes on FerretDB's SQLite backend take ~35 s on an idle 2-core machine, several times
# that on a busy one: the bound is for a hang, not for speed.
@pytest.mark.timeout(600)
async def test_nats_outage_during_500_writes_loses_no_event(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    from engram.app.production import storage_on_mongo
    from engram.authz.enforcement import FixedPrincipalAuthenticator
    from engram.domain.principals import LOCAL_ADMIN

    running = real_backends.running("nats")
    settings = server_settings(
        tmp_path,
        mongo_uri=real_backends.url("mongo"),
        nats_url=nats_url,
        mongo_db=f"outage_{uuid.uuid4().hex[:10]}",
    )
    async with storage_on_mongo(
        settings, authenticator=FixedPrincipalAuthenticator(LOCAL_ADMIN)
    ) as server:
        async with AsyncClient(f"127.0.0.1:{server.port}", space=NOTES) as client:
            await asyncio.to_thread(running.stop)
            semaphore = asyncio.Semaphore(16)

            async def write(i: int) -> None:
                async with semaphore:
                    await client.write_document(f"burst/{i:03d}.md", f"doc {i}")

            try:
                await asyncio.gather(*(write(i) for i in range(500)))
            finally:
                await asyncio.to_thread(real_backends.restart, "nats")
            events = await stream_events(nats_url, expect=500, within=90)
    assert len(events) == 500, "exactly one event per write, deduplicated by id"
    assert len({event.event_id for event, _ in events}) == 500
    assert {event.path for event, _ in events} == {f"burst/{i:03d}.md" for i in range(500)}


async def test_sigkill_mid_burst_loses_no_acknowledged_write_or_event(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    env = {
        **os.environ,
        "ENGRAM_MONGO_URI": real_backends.url("mongo"),
        "ENGRAM_MONGO_DB": f"kill_{uuid.uuid4().hex[:10]}",
        "ENGRAM_NATS_URL": nats_url,
        "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
        "ENGRAM_METRICS_PORT": "0",
        "ENGRAM_ACCESS_LOG": "false",
    }
    port = _free_port()
    command = [sys.executable, "-m", "engram", "serve", "storage", "--port", str(port)]
    token = mint("ann", "acme", "member")
    acked: dict[str, str] = {}
    enough_acked = asyncio.Event()

    def start() -> subprocess.Popen[bytes]:
        with open(tmp_path / "storage.log", "ab") as log:
            return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)

    process = start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            # No retries: a write is acknowledged by its own answer, or not at all.
            client = AsyncClient(channel=channel, token=token, space=NOTES, retries=0, timeout=10)

            async def writer(worker: int) -> None:
                for i in range(10_000):
                    path = f"kill/{worker}-{i:05d}.md"
                    try:
                        response = await client.write_document(path, f"{worker} {i}")
                    except EngramError:
                        return
                    acked[path] = response.document.sha256
                    if len(acked) >= 150:
                        enough_acked.set()

            writers = [asyncio.create_task(writer(w)) for w in range(8)]
            await asyncio.wait_for(enough_acked.wait(), 60)
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            await asyncio.gather(*writers)
        assert len(acked) >= 150
        process = start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            client = AsyncClient(channel=channel, token=token, space=NOTES)
            for path, sha256 in acked.items():
                assert (await client.read_document(path)).sha256 == sha256
        events = await stream_events(nats_url, expect=len(acked), within=60)
        published = {event.path: event.sha256 for event, _ in events}
        missing = [path for path in acked if published.get(path) != acked[path]]
        assert not missing, f"{len(missing)} acknowledged writes have no event"
    finally:
        process.kill()
        process.wait(10)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
