"""WatchSpace on `engram serve storage` (FerretDB + NATS JetStream): the change feed read from
ENGRAM_DOCS with a per-space subject filter, the stream sequence as cursor.

Covers: a watcher disconnected mid-burst of 500 writes resumes from its cursor, across a
restart of the storage server, and receives every change exactly once and in order; another
tenant is refused; a cursor whose events left the stream is CURSOR_EXPIRED; a cursor the stream
never had is CURSOR_AHEAD; without NATS WatchSpace answers UNAVAILABLE (writes still work).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from engram.client import AsyncClient, InvalidArgument, PermissionDenied, Space, Unavailable
from engram.runtime.interceptors import Authenticator
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint
from tests.support.watching import (
    NOTES,
    Watch,
    assert_exactly_once_in_order,
    burst_with_disconnect_and_restart,
    first_change,
)

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

STREAM = "ENGRAM_DOCS"


async def purge_stream(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await client.jetstream().purge_stream(STREAM)
    finally:
        await client.close()


@pytest.fixture
async def nats_url(real_backends: RealBackends) -> AsyncIterator[str]:
    url = real_backends.url("nats")
    await purge_stream(url)
    yield url


def local_admin() -> Authenticator:
    from engram.authz.enforcement import FixedPrincipalAuthenticator
    from engram.domain.principals import LOCAL_ADMIN

    return FixedPrincipalAuthenticator(LOCAL_ADMIN)


@contextlib.asynccontextmanager
async def storage(
    tmp_path: Path,
    real_backends: RealBackends,
    nats_url: str,
    database: str,
    *,
    authenticator: Authenticator | None = None,
    publish_events: bool = True,
) -> AsyncIterator[int]:
    from engram.app.production import storage_on_mongo

    settings = server_settings(
        tmp_path,
        mongo_uri=real_backends.url("mongo"),
        nats_url=nats_url,
        mongo_db=database,
        shutdown_grace_seconds=1.0,
        jwt_secret=TEST_JWT_SECRET,
    )
    async with storage_on_mongo(
        settings, authenticator=authenticator, publish_events=publish_events
    ) as server:
        yield server.port


# 500 writes on FerretDB's SQLite backend take ~35 s on an idle 2-core machine, several times
# that on a busy one: the bound is for a hang, not for speed.
@pytest.mark.timeout(900)
async def test_500_writes_disconnect_and_restart_exactly_once_in_order(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    database = f"feed_{uuid.uuid4().hex[:10]}"

    def start() -> contextlib.AbstractAsyncContextManager[int]:
        return storage(tmp_path, real_backends, nats_url, database, authenticator=local_admin())

    changes = await burst_with_disconnect_and_restart(start, count=500, paths=50, within=600)
    # The relay publishes pointers in write-time order; writes of different paths within one
    # millisecond may swap, a path's own versions never do.
    assert_exactly_once_in_order(changes, count=500, paths=50, global_order=False)


async def test_authz_cursors_and_no_nats(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    from engram.authz.tokens import JwtVerifier, TokenAuthenticator

    database = f"feed_{uuid.uuid4().hex[:10]}"
    tokens = TokenAuthenticator(
        JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None), None, cache_seconds=0
    )
    owner_token = mint("bob", "globex", "member")
    plans = Space(name=f"plans-{uuid.uuid4().hex[:6]}", tenant="globex")
    async with storage(tmp_path, real_backends, nats_url, database, authenticator=tokens) as port:
        async with AsyncClient(
            f"127.0.0.1:{port}", token=owner_token, space=plans, retries=0
        ) as owner:
            for i in range(3):
                await owner.write_document(f"p{i}.md", "plan")
            async with Watch(port, ref=plans, from_start=True, token=owner_token) as replay:
                await replay.received(3, within=60)
                await asyncio.wait_for(replay.caught_up.wait(), 30)
                assert [c.path for c in replay.changes] == ["p0.md", "p1.md", "p2.md"]
                cursors = [c.cursor for c in replay.changes]
            async with Watch(port, ref=plans, cursor=cursors[0], token=owner_token) as resumed:
                await resumed.received(2, within=30)
                await asyncio.wait_for(resumed.caught_up.wait(), 30)
                assert [c.path for c in resumed.changes] == ["p1.md", "p2.md"]

            intruder = owner.as_caller(mint("eve", "acme", "admin"), space=plans)
            with pytest.raises(PermissionDenied):
                await first_change(intruder, from_start=True)
            with pytest.raises(InvalidArgument) as ahead:
                await first_change(owner, cursor="1000000000")
            assert ahead.value.info_reason == "CURSOR_AHEAD"

            # The stream dropped its events (as max_age does after 7 days).
            await purge_stream(nats_url)
            with pytest.raises(InvalidArgument) as expired:
                await first_change(owner, cursor=cursors[0])
            assert expired.value.info_reason == "CURSOR_EXPIRED"
            assert "--from-start" in expired.value.message
            # The newest cursor has nothing missing after it: it goes on live.
            async with Watch(port, ref=plans, cursor=cursors[-1], token=owner_token) as live:
                await asyncio.wait_for(live.caught_up.wait(), 30)
                await owner.write_document("p3.md", "plan")
                await live.received(1, within=30)
                assert [c.path for c in live.changes] == ["p3.md"]

    # Storage that does not publish events has no feed.
    async with storage(
        tmp_path, real_backends, nats_url, database, authenticator=tokens, publish_events=False
    ) as port:
        async with AsyncClient(
            f"127.0.0.1:{port}", token=owner_token, space=plans, retries=0
        ) as owner:
            with pytest.raises(Unavailable):
                await first_change(owner)


async def test_nats_down_answers_unavailable_and_recovers(
    tmp_path: Path, real_backends: RealBackends, nats_url: str
) -> None:
    database = f"feed_{uuid.uuid4().hex[:10]}"
    running = real_backends.running("nats")
    async with storage(
        tmp_path, real_backends, nats_url, database, authenticator=local_admin()
    ) as port:
        async with AsyncClient(f"127.0.0.1:{port}", space=NOTES, retries=0) as client:
            await asyncio.to_thread(running.stop)
            try:
                await client.write_document("while-down.md", "kept in the outbox")
                with pytest.raises(Unavailable):
                    await first_change(client)
            finally:
                await asyncio.to_thread(real_backends.restart, "nats")
            # Once NATS is back the outbox is published and the feed replays it.
            async with Watch(port, from_start=True) as replay:
                await replay.received(1, within=60)
                assert [c.path for c in replay.changes] == ["while-down.md"]
