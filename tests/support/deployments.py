"""Storage, Quota and Authz with real authentication (JWTs signed with the test secret and
personal access tokens), on the embedded backend or on MongoDB, for the suites of issue 4."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from pydantic import SecretStr

from engram.app.embedded import embedded_engram
from engram.v1 import authz_pb2_grpc, quota_pb2_grpc, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, service_token

BACKENDS = ("sqlite", "mongo")


@dataclass
class Deployment:
    backend: str
    ports: dict[str, int]
    _channels: list[grpc.aio.Channel] = field(default_factory=list)
    # Set on the embedded backend, for tests that look inside.
    engram: Any = None

    def _channel(self, service: str) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports[service]}")
        self._channels.append(channel)
        return channel

    def storage(self) -> storage_pb2_grpc.StorageServiceStub:
        return storage_pb2_grpc.StorageServiceStub(self._channel("storage"))

    def quota(self) -> quota_pb2_grpc.QuotaServiceStub:
        return quota_pb2_grpc.QuotaServiceStub(self._channel("quota"))

    def authz(self) -> authz_pb2_grpc.AuthzServiceStub:
        return authz_pb2_grpc.AuthzServiceStub(self._channel("authz"))

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


@contextlib.asynccontextmanager
async def secure_deployment(
    backend: str, tmp_path: Path, real_backends: RealBackends, **overrides: Any
) -> AsyncIterator[Deployment]:
    values = {"jwt_secret": TEST_JWT_SECRET, **overrides}
    if backend == "sqlite":
        settings = server_settings(tmp_path / "engram", **values)
        async with embedded_engram(settings, require_auth=True) as engram:
            port = engram.port
            deployment = Deployment(
                backend, {"storage": port, "quota": port, "authz": port}, engram=engram
            )
            try:
                yield deployment
            finally:
                await deployment.close()
        return
    from engram.app.production import authz_on_mongo, quota_on_mongo, storage_on_mongo

    settings = server_settings(
        tmp_path / "engram",
        mongo_uri=real_backends.url("mongo"),
        mongo_db=f"engram_{uuid.uuid4().hex[:12]}",
        **values,
    )
    # As the chart deploys them: storage and quota look personal tokens up at authz, and
    # storage records its audit rows there as the service principal
    # (tests/contract/test_authz.py runs storage on a database without the tokens).
    async with authz_on_mongo(settings) as authz:
        callers = settings.model_copy(
            update={
                "authz_addr": f"127.0.0.1:{authz.port}",
                "service_token": SecretStr(service_token("storage")),
            }
        )
        async with storage_on_mongo(callers, publish_events=False) as storage:
            # QuotaService reads what the documents hold through StorageService.
            quota_settings = callers.model_copy(
                update={
                    "storage_addr": f"127.0.0.1:{storage.port}",
                    "service_token": SecretStr(service_token("quota")),
                }
            )
            async with quota_on_mongo(quota_settings) as quota:
                deployment = Deployment(
                    backend, {"storage": storage.port, "quota": quota.port, "authz": authz.port}
                )
                try:
                    yield deployment
                finally:
                    await deployment.close()
