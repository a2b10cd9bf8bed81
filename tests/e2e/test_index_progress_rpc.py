"""IndexerService.GetIndexProgress and search's reader of it (engram.search.indexer_progress),
over gRPC against `engram dev --auth` in process: the versions the indexer recorded come
back per document, only a service principal may ask, a waiter polling through the RPC
returns once a record reaches its position, and an indexer that does not answer makes the
read fail with a reason that says so (the search then answers degraded, naming it)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.authz.tokens import JwtVerifier, TokenAuthenticator
from engram.client.aio import EngramClient
from engram.domain.errors import InvalidArgument, PermissionDenied, Unavailable
from engram.domain.positions import FINISHED, MAX_POSITIONS, IndexLeg, IndexPosition
from engram.indexes.progress import wait_for_positions
from engram.search.indexer_progress import IndexerIndexProgress
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = pytest.mark.e2e

SPACE = "v1:private:acme::::notes"
KEY = (SPACE, "a.md", "doc-1")


@pytest.fixture
async def engram(tmp_path: Path) -> AsyncIterator[EmbeddedEngram]:
    authenticator = TokenAuthenticator(
        JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None), None, cache_seconds=0
    )
    async with embedded_engram(server_settings(tmp_path), authenticator=authenticator) as running:
        yield running


@contextlib.asynccontextmanager
async def client(engram: EmbeddedEngram, token: str) -> AsyncIterator[EngramClient]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel:
        yield EngramClient(channel=channel, token=token)


async def test_the_indexer_answers_each_legs_recorded_versions(engram: EmbeddedEngram) -> None:
    progress = engram.indexing.progress
    assert progress is not None
    await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"doc-1": 3, "doc-0": FINISHED})
    await progress.record(IndexLeg.VECTOR, SPACE, "a.md", {"doc-1": 2})
    async with client(engram, service_token("search")) as search:
        asked = [KEY, (SPACE, "a.md", "doc-0"), (SPACE, "b.md", "doc-2")]
        assert await search.index_progress("keyword", asked) == {
            KEY: 3,
            (SPACE, "a.md", "doc-0"): FINISHED,
        }
        # doc-0's row exists (the keyword leg wrote it): the vector leg holds nothing of it.
        assert await search.index_progress(IndexLeg.VECTOR, asked) == {
            KEY: 2,
            (SPACE, "a.md", "doc-0"): 0,
        }
        with pytest.raises(InvalidArgument, match=f"at most {MAX_POSITIONS}"):
            await search.index_progress("keyword", [KEY] * (MAX_POSITIONS + 1))
        with pytest.raises(InvalidArgument, match=r"documents\[0\]"):
            await search.index_progress("keyword", [(SPACE, "", "doc-1")])
    # A user, even a platform admin, may not probe documents across tenants this way.
    async with client(engram, mint("root", "acme", "admin", platform_admin=True)) as admin:
        with pytest.raises(PermissionDenied, match="engram's services"):
            await admin.index_progress("keyword", [KEY])


async def test_a_waiter_polling_the_indexer_returns_once_the_record_lands(
    engram: EmbeddedEngram,
) -> None:
    progress = engram.indexing.progress
    assert progress is not None
    position = IndexPosition(SPACE, "a.md", "doc-1", 2)
    async with client(engram, service_token("search")) as search:
        reader = IndexerIndexProgress(search)

        async def record_later() -> None:
            await asyncio.sleep(0.2)
            await progress.record(IndexLeg.KEYWORD, SPACE, "a.md", {"doc-1": 2})

        recording = asyncio.create_task(record_later())
        assert await wait_for_positions(reader, IndexLeg.KEYWORD, [position], 10.0) == []
        await recording
        # The other leg never reached it: the budget is spent and the position comes back.
        behind = await wait_for_positions(reader, IndexLeg.VECTOR, [position], 0.3)
        assert behind == [position]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_indexer_that_does_not_answer_is_named_in_the_failure() -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{closed_port()}") as channel:
        reader = IndexerIndexProgress(EngramClient(channel=channel, token=service_token()))
        position = IndexPosition(SPACE, "a.md", "doc-1", 1)
        with pytest.raises(Unavailable, match="the indexer did not answer GetIndexProgress"):
            await wait_for_positions(reader, IndexLeg.KEYWORD, [position], 5.0)
