"""Storage, quota and maintenance as the chart runs them, each on a database of its own
(issue 34): storage charges through QuotaService, QuotaService sums stored usage through
StorageService, and the maintenance worker acts through both, as service principals. None
of them can read another's collections: they are in another database."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.app.production import open_maintenance, quota_on_mongo, storage_on_mongo
from engram.backends.mongo import connect
from engram.client import AsyncClient, Space
from engram.runtime.server import GrpcServer
from engram.runtime.settings import Settings
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

ADMIN_TOKEN = mint("ada", "acme", "admin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class OwnedData:
    """The running topology; each service's settings name its own database."""

    tmp_path: Path
    real_backends: RealBackends
    run: str
    storage_port: int
    quota_port: int
    storage_stack: contextlib.AsyncExitStack
    storage: GrpcServer | None = None
    quota: GrpcServer | None = None

    def settings(self, service: str, **overrides: Any) -> Settings:
        return server_settings(
            self.tmp_path / service,
            mongo_uri=self.real_backends.url("mongo"),
            mongo_db=f"{service}_{self.run}",
            jwt_secret=TEST_JWT_SECRET,
            **overrides,
        )

    def storage_settings(self, **overrides: Any) -> Settings:
        return self.settings(
            "storage",
            grpc_port=self.storage_port,
            quota_addr=f"127.0.0.1:{self.quota_port}",
            service_token=service_token("storage"),
            **overrides,
        )

    def maintenance_settings(self, **overrides: Any) -> Settings:
        run = self.run
        return self.settings(
            "maintenance",
            storage_addr=f"127.0.0.1:{self.storage_port}",
            quota_addr=f"127.0.0.1:{self.quota_port}",
            service_token=service_token("maintenance"),
            nats_url=self.real_backends.url("nats"),
            opensearch_url=self.real_backends.url("opensearch"),
            opensearch_index=f"m{run}-chunks",
            opensearch_replicas=0,
            vector_dir=self.tmp_path / "vectors",
            indexer_durable=f"indexer-{run}",
            **overrides,
        )

    def client(self, port: int, space: Space | None = None) -> AsyncClient:
        return AsyncClient(f"127.0.0.1:{port}", token=ADMIN_TOKEN, space=space)

    async def start_storage(self, **overrides: Any) -> None:
        """(Re)starts StorageService on its port and database with these settings; its
        events go to NATS (a kept version whose event is unpublished is never pruned)."""
        await self.storage_stack.aclose()
        self.storage_stack = contextlib.AsyncExitStack()
        self.storage = await self.storage_stack.enter_async_context(
            storage_on_mongo(
                self.storage_settings(nats_url=self.real_backends.url("nats"), **overrides)
            )
        )

    @contextlib.asynccontextmanager
    async def maintenance(
        self, settings: dict[str, Any] | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The maintenance worker with these settings overridden (open_maintenance's
        keyword arguments in `kwargs`)."""
        async with open_maintenance(
            self.maintenance_settings(**(settings or {})), **kwargs
        ) as running:
            yield running


@contextlib.asynccontextmanager
async def owned_data(
    tmp_path: Path, real_backends: RealBackends, **storage_overrides: Any
) -> AsyncIterator[OwnedData]:
    """Storage and QuotaService running, each on its own database (dropped afterwards)."""
    topology = OwnedData(
        tmp_path,
        real_backends,
        uuid.uuid4().hex[:10],
        _free_port(),
        _free_port(),
        contextlib.AsyncExitStack(),
    )
    quota_settings = topology.settings(
        "quota",
        grpc_port=topology.quota_port,
        storage_addr=f"127.0.0.1:{topology.storage_port}",
        service_token=service_token("quota"),
    )
    try:
        async with quota_on_mongo(quota_settings) as topology.quota:
            await topology.start_storage(**storage_overrides)
            try:
                yield topology
            finally:
                await topology.storage_stack.aclose()
    finally:
        client, _ = connect(real_backends.url("mongo"), "admin")
        for service in ("storage", "quota", "maintenance", "authz"):
            await client.drop_database(f"{service}_{topology.run}")
        await client.close()
