"""Engram (also `Client`): the blocking face of EngramClient, for scripts and code without
an event loop.

It holds one EngramClient on grpc's blocking channel (engram.client.driven) and runs each
call's coroutine to its end in the calling thread, so the methods, arguments, results,
retries and errors are EngramClient's own: each method below is EngramClient's, wrapped
once (`_blocking` for a call, `_blocking_iter` for the iterators, which become plain
iterators). No event loop and no thread of its own; calls may come from any thread and
share one channel. Close it (or use `with`) to close the channel.

An import's source is read in the calling thread: bytes, a path, a binary file or an
iterable of bytes (an async iterable needs AsyncClient).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from engram.client.aio import DEFAULT_ADDR, EngramClient
from engram.client.base import DEFAULT_STREAM_TIMEOUT, DEFAULT_TIMEOUT
from engram.client.driven import drive
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


def _blocking_iter(
    method: Callable[Concatenate[EngramClient, P], AsyncIterator[R]],
) -> Callable[Concatenate[Engram, P], Generator[R, None, None]]:
    def call(engram: Engram, /, *args: P.args, **kwargs: P.kwargs) -> Generator[R, None, None]:
        stream = method(engram.client, *args, **kwargs)
        try:
            while True:
                try:
                    yield engram._run(_next(stream))
                except StopAsyncIteration:
                    return
        finally:
            drive(_close(stream))

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


async def _next(stream: AsyncIterator[R]) -> R:
    return await anext(stream)


async def _close(stream: AsyncIterator[Any]) -> None:
    closing = getattr(stream, "aclose", None)
    if closing is not None:
        await closing()


class _State:
    """Whether the channel is closed, shared by a client and its `with_options` copies."""

    closed = False


class Engram:
    """Blocking client: `with Engram(addr, token=..., space=Space(name="agent-1")) as m:`."""

    def __init__(
        self,
        addr: Addresses = DEFAULT_ADDR,
        *,
        token: str = "",
        space: Space | None = None,
        retries: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
        tls: bool | ClientTls = False,
    ) -> None:
        self.client = EngramClient(
            addr,
            token=token,
            space=space,
            retries=retries,
            timeout=timeout,
            stream_timeout=stream_timeout,
            tls=tls,
            _blocking=True,
        )
        self._state = _State()

    def with_options(
        self,
        *,
        timeout: float | None = None,
        stream_timeout: float | None = None,
        retries: int | None = None,
        space: Space | None = None,
    ) -> Engram:
        """This client with other defaults, on the same channel (see
        EngramClient.with_options); closing either closes both."""
        changed = object.__new__(Engram)
        changed.client = self.client.with_options(
            timeout=timeout, stream_timeout=stream_timeout, retries=retries, space=space
        )
        changed._state = self._state
        return changed

    @property
    def space(self) -> Space:
        return self.client.space

    def _run(self, work: Coroutine[Any, Any, R]) -> R:
        if self._state.closed:
            work.close()
            raise RuntimeError("this Engram client is closed")
        return drive(work)

    def close(self) -> None:
        """Closes the channel; idempotent."""
        if self._state.closed:
            return
        drive(self.client.close())
        self._state.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    wait_ready = _blocking(EngramClient.wait_ready)
    # WorkspaceService
    memory_write = _blocking(EngramClient.memory_write)
    memory_read = _blocking(EngramClient.memory_read)
    memory_tree = _blocking(EngramClient.memory_tree)
    memory_search = _blocking(EngramClient.memory_search)
    append_daily_log = _blocking(EngramClient.append_daily_log)
    system_prompt = _blocking(EngramClient.system_prompt)
    seed_workspace = _blocking(EngramClient.seed_workspace)
    complete_bootstrap = _blocking(EngramClient.complete_bootstrap)
    # StorageService
    read_document = _blocking(EngramClient.read_document)
    write_document = _blocking(EngramClient.write_document)
    delete_document = _blocking(EngramClient.delete_document)
    list_documents = _blocking(EngramClient.list_documents)
    iter_documents = _blocking_iter(EngramClient.iter_documents)
    list_document_versions = _blocking(EngramClient.list_document_versions)
    iter_document_versions = _blocking_iter(EngramClient.iter_document_versions)
    get_usage = _blocking(EngramClient.get_usage)
    export_chunks = _blocking_iter(EngramClient.export_chunks)
    export_space = _blocking(EngramClient.export_space)
    import_space = _blocking(EngramClient.import_space)
    purge_document = _blocking(EngramClient.purge_document)
    delete_space = _blocking(EngramClient.delete_space)
    list_spaces = _blocking(EngramClient.list_spaces)
    iter_spaces = _blocking_iter(EngramClient.iter_spaces)
    list_all_documents = _blocking(EngramClient.list_all_documents)
    iter_all_documents = _blocking_iter(EngramClient.iter_all_documents)
    watch_space = _blocking_iter(EngramClient.watch_space)
    # StorageService's upkeep (service principals)
    stored_usage = _blocking(EngramClient.stored_usage)
    sum_stored_usage = _blocking(EngramClient.sum_stored_usage)
    prune_versions = _blocking(EngramClient.prune_versions)
    list_all_spaces = _blocking(EngramClient.list_all_spaces)
    scan_documents = _blocking(EngramClient.scan_documents)
    iter_scan_documents = _blocking_iter(EngramClient.iter_scan_documents)
    # SearchService
    search = _blocking(EngramClient.search)
    # QuotaService
    charge = _blocking(EngramClient.charge)
    quota_usage = _blocking(EngramClient.quota_usage)
    set_tenant_quota = _blocking(EngramClient.set_tenant_quota)
    set_org_quota = _blocking(EngramClient.set_org_quota)
    set_tenant_org = _blocking(EngramClient.set_tenant_org)
    reconcile = _blocking(EngramClient.reconcile)
    # AuthzService
    authenticate = _blocking(EngramClient.authenticate)
    authorize = _blocking(EngramClient.authorize)
    create_token = _blocking(EngramClient.create_token)
    revoke_token = _blocking(EngramClient.revoke_token)
    list_tokens = _blocking(EngramClient.list_tokens)
    iter_tokens = _blocking_iter(EngramClient.iter_tokens)
    list_audit_events = _blocking(EngramClient.list_audit_events)
    iter_audit_events = _blocking_iter(EngramClient.iter_audit_events)
    record_audit_event = _blocking(EngramClient.record_audit_event)
    # IndexerService
    reindex = _blocking(EngramClient.reindex)
    index_status = _blocking(EngramClient.index_status)
    index_progress = _blocking(EngramClient.index_progress)
    # MaintenanceService
    list_job_runs = _blocking(EngramClient.list_job_runs)
    iter_job_runs = _blocking_iter(EngramClient.iter_job_runs)
    run_job = _blocking(EngramClient.run_job)
    get_space_maintenance = _blocking(EngramClient.get_space_maintenance)
    set_space_maintenance = _blocking(EngramClient.set_space_maintenance)
