"""Storage, Quota and Authz with real authentication (JWTs signed with the test secret and
personal access tokens), on the embedded backend or on MongoDB, for the suites of issue 4.

Suites call a service as any caller would through `Deployment.client(service, token)`, an
engram.client.AsyncClient sending that token; the few that speak the wire themselves (the
RAW_WIRE list of tests/unit/test_one_client.py) build their stubs on `Deployment.channel`."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from pydantic import SecretStr

from engram.app.embedded import embedded_core_server, embedded_engram
from engram.client import AsyncClient, EngramError
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, service_token

BACKENDS = ("sqlite", "mongo")

E = TypeVar("E", bound=EngramError)


async def refused(call: Awaitable[object], kind: type[E], reason: str = "") -> E:
    """Awaits a client call, asserting it fails as `kind` (and with ErrorInfo `reason`),
    never with a traceback in its message; the error, for its metadata."""
    with pytest.raises(kind) as caught:
        await call
    error = caught.value
    assert "Traceback" not in error.message
    if reason:
        assert error.info_reason == reason, error.info_reason
    return error


@dataclass
class Deployment:
    backend: str
    ports: dict[str, int]
    _channels: list[grpc.aio.Channel] = field(default_factory=list)
    _clients: dict[str, AsyncClient] = field(default_factory=dict)
    # Set on the embedded backend, for tests that look inside.
    engram: Any = None

    def channel(self, service: str) -> grpc.aio.Channel:
        """A new channel to `service` ("storage", "quota", "authz"), closed with the
        deployment: for the suites that send what the client cannot (RAW_WIRE)."""
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.ports[service]}")
        self._channels.append(channel)
        return channel

    def client(self, service: str, token: str = "") -> AsyncClient:
        """engram.client calling `service` with `token` (none: unauthenticated); the clients
        of one service share its channel, closed with the deployment. For other defaults
        (`retries=0`, a deadline) use `.with_options(...)` on it."""
        shared = self._clients.get(service)
        if shared is None:
            shared = self._clients[service] = AsyncClient(f"127.0.0.1:{self.ports[service]}")
        return shared.as_caller(token)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        for channel in self._channels:
            await channel.close()


@contextlib.asynccontextmanager
async def secure_deployment(
    backend: str,
    tmp_path: Path,
    real_backends: RealBackends,
    *,
    whole_dev: bool = False,
    **overrides: Any,
) -> AsyncIterator[Deployment]:
    """Storage, quota and authz with authentication on `backend`. On SQLite: `engram dev`'s
    core alone, or with `whole_dev` every service of `engram dev` on the one port."""
    values = {"jwt_secret": TEST_JWT_SECRET, **overrides}
    if backend == "sqlite":
        settings = server_settings(tmp_path / "engram", **values)
        serving = embedded_engram if whole_dev else embedded_core_server
        async with serving(settings, require_auth=True) as engram:
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
