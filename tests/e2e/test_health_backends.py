"""Health follows the backends: `engram serve indexer` turns NOT_SERVING while NATS or
OpenSearch is stopped and SERVING again once it is back, without restarting engram.

Each test stops a backend this session started (and leaves it running when it ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.app.production import indexer_on_backends, search_on_backends
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, service_token

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend, pytest.mark.timeout(240)]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@contextlib.asynccontextmanager
async def indexer_health(
    tmp_path: Path, backends: RealBackends
) -> AsyncIterator[health_pb2_grpc.HealthStub]:
    run = uuid.uuid4().hex[:10]
    settings = server_settings(
        tmp_path,
        mongo_uri=backends.url("mongo"),
        mongo_db=f"health_{run}",
        nats_url=backends.url("nats"),
        jwt_secret=TEST_JWT_SECRET,
        opensearch_url=backends.url("opensearch"),
        opensearch_index=f"h{run}-chunks",
        opensearch_replicas=0,
        vector_dir=tmp_path / "vectors",
        storage_addr="127.0.0.1:9",
        service_token=service_token(),
        indexer_durable=f"health-{run}",
        health_probe_seconds=0.5,
        shutdown_grace_seconds=1.0,
    )
    async with indexer_on_backends(settings) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield health_pb2_grpc.HealthStub(channel)


async def status_becomes(
    health: health_pb2_grpc.HealthStub,
    wanted: int,
    within: float,
    *,
    service: str = "engram.v1.IndexerService",
) -> None:
    async with asyncio.timeout(within):
        while True:
            for name in ("", service):
                answer = await health.Check(health_pb2.HealthCheckRequest(service=name))
                if answer.status != wanted:
                    break
            else:
                return
            await asyncio.sleep(0.2)


async def test_indexer_health_follows_nats(tmp_path: Path, real_backends: RealBackends) -> None:
    nats = real_backends.running("nats")
    async with indexer_health(tmp_path, real_backends) as health:
        await status_becomes(health, SERVING, 10)
        try:
            await asyncio.to_thread(nats.stop)
            await status_becomes(health, NOT_SERVING, 15)
        finally:
            await asyncio.to_thread(real_backends.restart, "nats")
        await status_becomes(health, SERVING, 30)


async def test_indexer_health_follows_opensearch_and_search_needs_either_index(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    """The indexer needs OpenSearch; search answers (degraded) from Qdrant meanwhile, so it
    stays SERVING."""
    opensearch = real_backends.running("opensearch")
    search_settings = server_settings(
        tmp_path / "search",
        mongo_uri=real_backends.url("mongo"),
        mongo_db=f"health_{uuid.uuid4().hex[:10]}",
        opensearch_url=real_backends.url("opensearch"),
        opensearch_index=f"h{uuid.uuid4().hex[:10]}-chunks",
        opensearch_replicas=0,
        qdrant_path=tmp_path / "qdrant",
        jwt_secret=TEST_JWT_SECRET,
        health_probe_seconds=0.5,
    )
    async with (
        indexer_health(tmp_path / "indexer", real_backends) as health,
        search_on_backends(search_settings) as search,
        grpc.aio.insecure_channel(f"127.0.0.1:{search.port}") as search_channel,
    ):
        search_health = health_pb2_grpc.HealthStub(search_channel)
        await status_becomes(health, SERVING, 10)
        await status_becomes(search_health, SERVING, 10, service="engram.v1.SearchService")
        try:
            await asyncio.to_thread(opensearch.stop)
            await status_becomes(health, NOT_SERVING, 15)
            answer = await search_health.Check(health_pb2.HealthCheckRequest(service=""))
            assert answer.status == SERVING, "search still answers from the vector index"
        finally:
            await asyncio.to_thread(real_backends.restart, "opensearch")
        await status_becomes(health, SERVING, 60)
