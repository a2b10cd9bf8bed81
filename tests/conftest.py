"""Fixtures shared by every suite: embedded servers, gRPC stubs, real backends."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from tests.support.backends import RealBackends
from tests.support.settings import server_settings

REQUIRE_REAL_BACKENDS = os.environ.get("ENGRAM_REQUIRE_REAL_BACKENDS") == "1"
# Tests start backends that `make backends-install` built; they never build one themselves.
os.environ["ENGRAM_BACKENDS_OFFLINE"] = "1"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Each session gets a temporary root of its own (unless --basetemp names one).

    The launcher runs PostgreSQL as `nobody`, which must traverse every directory above its
    data dir, so it makes them traversable. pytest's shared /tmp/pytest-of-<user> is set back
    to 0700 by every pytest session that starts, which would cut a running suite's clusters
    off their files whenever another session starts on the machine."""
    if config.option.basetemp is None:
        root = Path(tempfile.mkdtemp(prefix="engram-pytest-"))
        config.option.basetemp = str(root / "t")
        config.stash[_SESSION_TMP] = root


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Removes the session's temporary root when every test passed (kept for a look
    otherwise, like pytest's own)."""
    root = session.config.stash.get(_SESSION_TMP, None)
    if root is None:
        return
    if exitstatus == 0:
        shutil.rmtree(root, ignore_errors=True)
    else:
        session.config.get_terminal_writer().line(f"temporary files kept in {root}")


_SESSION_TMP = pytest.StashKey[Path]()

EngramFactory = Callable[..., AbstractAsyncContextManager[EmbeddedEngram]]


@pytest.fixture
def engram_factory(tmp_path: Path) -> EngramFactory:
    """Starts an all-in-one server with setting overrides: `async with engram_factory(**kw)`."""

    def start(**overrides: Any) -> AbstractAsyncContextManager[EmbeddedEngram]:
        data_dir = overrides.pop("data_dir", tmp_path / "engram")
        return embedded_engram(server_settings(data_dir, **overrides))

    return start


@pytest.fixture
async def engram(engram_factory: EngramFactory) -> AsyncIterator[EmbeddedEngram]:
    async with engram_factory() as running:
        yield running


@pytest.fixture
async def channel(engram: EmbeddedEngram) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as opened:
        yield opened


@pytest.fixture(scope="session")
def real_backends() -> Iterator[RealBackends]:
    """NATS, FerretDB and OpenSearch from deploy/local (or the ENGRAM_TEST_* URLs), started
    lazily, one each per test session."""
    backends = RealBackends(require=REQUIRE_REAL_BACKENDS)
    try:
        yield backends
    finally:
        backends.stop_all()
