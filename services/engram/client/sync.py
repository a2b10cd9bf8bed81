"""Engram: the blocking face of EngramClient, for scripts and code without an event loop.

It runs one EngramClient on a private event loop in a daemon thread and waits for each
call, so the methods, arguments, results, retries and errors are EngramClient's own.
Calls may come from any thread; they share one channel. Close it (or use `with`) to stop
the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from engram.client.aio import DEFAULT_ADDR, EngramClient
from engram.client.models import Space
from engram.runtime.channels import Addresses, ClientTls

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(
    method: Callable[Concatenate[EngramClient, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Engram, P], R]:
    def call(engram: Engram, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return engram._run(method(engram.client, *args, **kwargs))

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class Engram:
    """Blocking client: `with Engram(addr, token=..., space=Space(name="agent-1")) as m:`."""

    def __init__(
        self,
        addr: Addresses = DEFAULT_ADDR,
        *,
        token: str = "",
        space: Space | None = None,
        retries: int = 3,
        timeout: float = 30.0,
        tls: bool | ClientTls = False,
    ) -> None:
        self.client = EngramClient(
            addr, token=token, space=space, retries=retries, timeout=timeout, tls=tls
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="engram-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    def _run(self, work: Coroutine[Any, Any, R]) -> R:
        if self._closed:
            work.close()
            raise RuntimeError("this Engram client is closed")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def close(self) -> None:
        """Closes the channel and stops the loop's thread; idempotent."""
        if self._closed:
            return
        self._run(self.client.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    memory_write = _blocking(EngramClient.memory_write)
    memory_read = _blocking(EngramClient.memory_read)
    memory_tree = _blocking(EngramClient.memory_tree)
    memory_search = _blocking(EngramClient.memory_search)
    append_daily_log = _blocking(EngramClient.append_daily_log)
    system_prompt = _blocking(EngramClient.system_prompt)
    seed_workspace = _blocking(EngramClient.seed_workspace)
    complete_bootstrap = _blocking(EngramClient.complete_bootstrap)
    read_document = _blocking(EngramClient.read_document)
    write_document = _blocking(EngramClient.write_document)
    delete_document = _blocking(EngramClient.delete_document)
    list_documents = _blocking(EngramClient.list_documents)
    search = _blocking(EngramClient.search)
