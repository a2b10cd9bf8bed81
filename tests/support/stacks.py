"""Servers for the storage contract suite, one per backend, all behind the same gRPC API."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from engram.app.embedded import embedded_core_server
from tests.support.backends import RealBackends
from tests.support.settings import server_settings

BACKENDS = ("sqlite", "mongo")


@contextlib.asynccontextmanager
async def storage_server(
    backend: str, tmp_path: Path, real_backends: RealBackends, **overrides: Any
) -> AsyncIterator[int]:
    """Serves StorageService on `backend`; yields the port. On SQLite it is `engram dev`'s
    core (storage, quota, authz) without the indexes, search and workspace, as storage on
    MongoDB runs without them."""
    if backend == "sqlite":
        settings = server_settings(tmp_path / "engram", **overrides)
        async with embedded_core_server(settings) as engram:
            yield engram.port
        return
    from engram.app.production import storage_on_mongo

    overrides.setdefault("mongo_db", f"engram_test_{uuid.uuid4().hex[:12]}")
    settings = server_settings(
        tmp_path / "engram", mongo_uri=real_backends.url("mongo"), **overrides
    )
    from engram.authz.enforcement import FixedPrincipalAuthenticator
    from engram.domain.principals import LOCAL_ADMIN

    async with storage_on_mongo(
        settings, publish_events=False, authenticator=FixedPrincipalAuthenticator(LOCAL_ADMIN)
    ) as server:
        yield server.port
