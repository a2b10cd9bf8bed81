"""EngramClient: engram's typed asyncio client (grpc.aio) for agents and applications.

Replicas: `addr` is one `host:port`, several replicas' `ip:port` (a list, or one string
"127.0.0.1:50061,127.0.0.1:50062"), or a `dns:///name:port` target whose name resolves to
each replica (a headless Kubernetes Service). Several replicas are balanced round-robin
(gRPC's `round_robin` policy over one channel): a replica that goes down is left out once
its connection fails, and the calls it was serving fail UNAVAILABLE, which the retries
below send to another replica.

Retries: a call that fails with UNAVAILABLE (the server down or restarting, a dropped link,
a backend engram reports unavailable) is retried with exponential backoff and jitter, up to
`retries` more times, only when repeating it cannot apply a change twice:

- always: reads, listings, searches, `memory_read`, `memory_tree`, `memory_search`,
  `seed_workspace` (create-only writes) and `system_prompt`;
- writes that set a whole document: `write_document` in replace mode (with or without
  `expected_sha256` / `create_only`: a repeat leaves the same content) and `memory_write`
  with `append=False`. A conditional write whose first attempt landed unseen answers
  `EtagMismatch` on the repeat, its `current_sha256` equal to the content's sha256;
- conditional appends: `write_document(append=True)` with `expected_sha256` or
  `create_only`. A repeat after an attempt that landed unseen cannot append twice: the
  document no longer has the expected sha256 (or exists), so it answers `EtagMismatch`,
  which the caller resolves by reading the document;
- never: unconditional appends (`write_document(append=True)` without a condition,
  `memory_write` appending, the default, and `append_daily_log`), `delete_document` and
  `complete_bootstrap`: the server keeps no request ids, so a repeat after a lost answer
  would append the entry twice or answer NOT_FOUND for a change that happened. These raise
  `Unavailable` for the caller to decide (the change may or may not have been made).

Every other failure raises at once as its engram.domain.errors class (InvalidArgument,
NotFound, PermissionDenied with `rule`, EtagMismatch, QuotaExceeded, RateLimited with
`retry_after_seconds`, Unauthenticated, Unavailable ...); grpc.RpcError never escapes.
`timeout` is each attempt's deadline in seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from engram.client import mapping
from engram.client.errors import domain_error
from engram.client.models import (
    Document,
    DocumentPage,
    DocumentWrite,
    Heartbeat,
    MemoryDocument,
    SearchResults,
    SeedResult,
    Space,
    SystemPrompt,
    TreeNode,
    WriteResult,
)
from engram.domain.errors import InvalidArgument
from engram.domain.positions import IndexPosition
from engram.runtime.channels import (
    Addresses,
    ChannelConfig,
    ClientTls,
    channel_target,
    open_channel,
)
from engram.v1 import (
    search_pb2,
    search_pb2_grpc,
    space_pb2,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from engram.wire import position_to_proto

log = logging.getLogger("engram.client")

DEFAULT_ADDR = "127.0.0.1:50051"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# Backoff between attempts: 0.25 s, 0.5 s, 1 s ... capped at 4 s, plus up to 0.25 s jitter.
BACKOFF_INITIAL = 0.25
BACKOFF_MAX = 4.0

Request = TypeVar("Request")
Response = TypeVar("Response")


@dataclass(frozen=True, slots=True)
class _Stubs:
    workspace: workspace_pb2_grpc.WorkspaceServiceAsyncStub
    storage: storage_pb2_grpc.StorageServiceAsyncStub
    search: search_pb2_grpc.SearchServiceAsyncStub


def _unavailable(error: BaseException) -> bool:
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE


def _log_retry(peer: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s unavailable (attempt %d), retrying in %.2f s",
            peer,
            state.attempt_number,
            delay,
            extra={"peer": peer, "attempt": state.attempt_number},
        )

    return before_sleep


class EngramClient:
    """Async client of an engram server (or of several replicas, balanced round-robin):
    WorkspaceService (the memory tools), and the basics of StorageService and SearchService.
    Each method takes `space=` to override the default.

    Use it as `async with EngramClient(addr, token=..., space=Space(name="agent-1")) as c:`;
    the channel opens on the first call, inside the running event loop.
    """

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
        """`addr`: one address or several replicas (see the module's docstring).
        `tls=True` checks the server's certificate against the system's roots;
        `tls=ClientTls(ca_file=..., cert_file=..., key_file=...)` against a private CA,
        presenting a client certificate for mTLS (with several replicas set
        `ClientTls.server_name` to the name their certificates carry)."""
        if retries < 0:
            raise InvalidArgument("retries must be 0 or more", field="retries")
        if timeout <= 0:
            raise InvalidArgument("timeout must be more than 0 seconds", field="timeout")
        try:
            self.target = channel_target(addr)
        except ValueError as error:
            raise InvalidArgument(str(error), field="addr") from None
        self.addr = addr
        self.space = space or Space()
        self.retries = retries
        self.timeout = timeout
        self._tls = ClientTls() if tls is True else tls or None
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._channel: grpc.aio.Channel | None = None
        self._opened: _Stubs | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the channel; the next call opens a new one."""
        if self._channel is not None:
            channel, self._channel, self._opened = self._channel, None, None
            await channel.close()

    @property
    def _stubs(self) -> _Stubs:
        if self._opened is None:
            self._opened = self._open()
        return self._opened

    def _open(self) -> _Stubs:
        reconnect: list[tuple[str, str | int]] = [
            # Reconnect about as fast as the retries come, so a restarted server is found by
            # the next attempt rather than after grpc's default 1 s+ reconnect backoff.
            ("grpc.initial_reconnect_backoff_ms", int(BACKOFF_INITIAL * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(BACKOFF_INITIAL * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX * 1000)),
        ]
        config = ChannelConfig(tls=self._tls, max_message_bytes=MAX_MESSAGE_BYTES)
        try:
            channel = open_channel(self.addr, config, reconnect)
        except OSError as error:
            raise InvalidArgument(str(error), field="tls") from None
        self._channel = channel
        return _Stubs(
            workspace=workspace_pb2_grpc.WorkspaceServiceStub(channel),
            storage=storage_pb2_grpc.StorageServiceStub(channel),
            search=search_pb2_grpc.SearchServiceStub(channel),
        )

    async def _call(
        self,
        peer: str,
        call: grpc.aio.UnaryUnaryMultiCallable[Request, Response],
        request: Request,
        *,
        idempotent: bool,
    ) -> Response:
        """One RPC to `peer` ("WorkspaceService.MemoryWrite"), retried on UNAVAILABLE when
        `idempotent`; failures raise as domain errors."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1 if idempotent else 1),
            wait=wait_exponential_jitter(multiplier=BACKOFF_INITIAL, max=BACKOFF_MAX, jitter=0.25),
            retry=retry_if_exception(_unavailable),
            before_sleep=_log_retry(peer),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await call(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as error:
            raise domain_error(error, peer) from None
        raise AssertionError("unreachable: tenacity either returns or reraises")

    def _space(self, space: Space | None) -> space_pb2.SpaceRef:
        return mapping.space_to_proto(space or self.space)

    # --- WorkspaceService ---------------------------------------------------------------------

    async def memory_write(
        self,
        content: str,
        *,
        target: str = "daily_log",
        append: bool | None = None,
        time_zone: str = "",
        session: str = "",
        heartbeat: Heartbeat | None = None,
        space: Space | None = None,
    ) -> WriteResult:
        """Writes `content` to `target`: "daily_log" (today's daily/YYYY-MM-DD.md, the entry
        timestamped), "memory" (MEMORY.md), "heartbeat" (HEARTBEAT.md) or a custom .md path.
        `append` defaults to True on the server; False replaces the document."""
        request = mapping.memory_write_request(
            (space or self.space),
            content,
            target=target,
            append=append,
            time_zone=time_zone,
            session=session,
            heartbeat=heartbeat,
        )
        response = await self._call(
            "WorkspaceService.MemoryWrite",
            self._stubs.workspace.MemoryWrite,
            request,
            idempotent=append is False,
        )
        return mapping.write_result(response)

    async def memory_read(self, path: str, *, space: Space | None = None) -> MemoryDocument:
        """Reads a workspace document; NotFound names the path."""
        request = workspace_pb2.MemoryReadRequest(space=self._space(space), path=path)
        response = await self._call(
            "WorkspaceService.MemoryRead",
            self._stubs.workspace.MemoryRead,
            request,
            idempotent=True,
        )
        return mapping.memory_document(response)

    async def memory_tree(
        self, path: str = "", *, depth: int = 0, space: Space | None = None
    ) -> list[TreeNode]:
        """The workspace (or the directory `path`) as a tree, `depth` 1..10 levels (0 = 1)."""
        request = workspace_pb2.MemoryTreeRequest(space=self._space(space), path=path, depth=depth)
        response = await self._call(
            "WorkspaceService.MemoryTree",
            self._stubs.workspace.MemoryTree,
            request,
            idempotent=True,
        )
        return [mapping.tree_node(node) for node in response.nodes]

    async def memory_search(
        self,
        query: str,
        *,
        limit: int = 0,
        space: Space | None = None,
        min_positions: Sequence[IndexPosition] = (),
        max_wait_ms: int = 0,
        min_relevance: float | None = None,
    ) -> SearchResults:
        """Hybrid search of the workspace, best first; `limit` 1..20 (0 = 5).
        `min_relevance`: no hits unless one is at least this likely relevant (None = the
        server's default, which answers nothing when nothing relevant is stored; 0 = off).
        `min_positions` (from memory_write / append_daily_log results): answer once the
        indexes hold those writes, waiting at most `max_wait_ms` (0 = the server's cap and
        this client's timeout); past it the answer is degraded."""
        request = workspace_pb2.MemorySearchRequest(
            space=self._space(space),
            query=query,
            limit=limit,
            min_positions=[position_to_proto(p) for p in min_positions],
            max_wait_ms=max_wait_ms,
            min_relevance=min_relevance,
        )
        response = await self._call(
            "WorkspaceService.MemorySearch",
            self._stubs.workspace.MemorySearch,
            request,
            idempotent=True,
        )
        return mapping.memory_search_results(response)

    async def append_daily_log(
        self, entry: str, *, time_zone: str = "", session: str = "", space: Space | None = None
    ) -> WriteResult:
        """Appends one "[HH:MM:SS] entry" line to today's daily log (never retried)."""
        request = workspace_pb2.AppendDailyLogRequest(
            space=self._space(space), entry=entry, time_zone=time_zone, session=session
        )
        response = await self._call(
            "WorkspaceService.AppendDailyLog",
            self._stubs.workspace.AppendDailyLog,
            request,
            idempotent=False,
        )
        return mapping.daily_log_result(response)

    async def system_prompt(
        self, *, group_context: bool = False, time_zone: str = "", space: Space | None = None
    ) -> SystemPrompt:
        """The assembled system prompt. Retried on UNAVAILABLE: if an attempt assembled the
        prompt but its answer was lost, a one-time SOUL.md notice it carried is lost too."""
        request = workspace_pb2.GetSystemPromptRequest(
            space=self._space(space), group_context=group_context, time_zone=time_zone
        )
        response = await self._call(
            "WorkspaceService.GetSystemPrompt",
            self._stubs.workspace.GetSystemPrompt,
            request,
            idempotent=True,
        )
        return mapping.system_prompt(response)

    async def seed_workspace(self, *, space: Space | None = None) -> SeedResult:
        """Copies the default templates into the workspace, never overwriting a file."""
        request = workspace_pb2.SeedWorkspaceRequest(space=self._space(space))
        response = await self._call(
            "WorkspaceService.SeedWorkspace",
            self._stubs.workspace.SeedWorkspace,
            request,
            idempotent=True,
        )
        return mapping.seed_result(response)

    async def complete_bootstrap(self, *, space: Space | None = None) -> str:
        """Archives BOOTSTRAP.md; returns where it now lives. NotFound without one."""
        request = workspace_pb2.CompleteBootstrapRequest(space=self._space(space))
        response = await self._call(
            "WorkspaceService.CompleteBootstrap",
            self._stubs.workspace.CompleteBootstrap,
            request,
            idempotent=False,
        )
        return response.archived_path

    # --- StorageService -----------------------------------------------------------------------

    async def read_document(
        self, path: str, *, version: int = 0, space: Space | None = None
    ) -> Document:
        """A document (or its kept `version`); NotFound if absent."""
        request = storage_pb2.ReadDocumentRequest(
            space=self._space(space), path=path, version=version
        )
        response = await self._call(
            "StorageService.ReadDocument",
            self._stubs.storage.ReadDocument,
            request,
            idempotent=True,
        )
        return mapping.document(response.document)

    async def write_document(
        self,
        path: str,
        content: str,
        *,
        append: bool = False,
        expected_sha256: str = "",
        create_only: bool = False,
        append_as_line: bool = False,
        prefix_if_created: str = "",
        space: Space | None = None,
    ) -> DocumentWrite:
        """Replaces (or appends to) a document; `expected_sha256` / `create_only` make the
        write conditional (EtagMismatch when the condition does not hold). An append with
        `append_as_line` starts on a line of its own, and `prefix_if_created` goes before it
        when it creates the document (both decided by the server). Retried on UNAVAILABLE
        unless it is an unconditional append."""
        request = storage_pb2.WriteDocumentRequest(
            space=self._space(space),
            path=path,
            content=content,
            mode=storage_pb2.WRITE_MODE_APPEND if append else storage_pb2.WRITE_MODE_REPLACE,
            expected_sha256=expected_sha256,
            create_only=create_only,
            append_as_line=append_as_line,
            prefix_if_created=prefix_if_created,
        )
        response = await self._call(
            "StorageService.WriteDocument",
            self._stubs.storage.WriteDocument,
            request,
            idempotent=not append or bool(expected_sha256) or create_only,
        )
        return mapping.document_write(response)

    async def delete_document(
        self, path: str, *, expected_sha256: str = "", space: Space | None = None
    ) -> int:
        """Deletes a document; returns the bytes freed. NotFound if absent."""
        request = storage_pb2.DeleteDocumentRequest(
            space=self._space(space), path=path, expected_sha256=expected_sha256
        )
        response = await self._call(
            "StorageService.DeleteDocument",
            self._stubs.storage.DeleteDocument,
            request,
            idempotent=False,
        )
        return response.deleted_bytes

    async def list_documents(
        self,
        dir: str = "",
        *,
        recursive: bool = False,
        page_size: int = 0,
        page_token: str = "",
        space: Space | None = None,
    ) -> DocumentPage:
        """One page of a directory listing, in path order (page_size 0 = 100)."""
        request = storage_pb2.ListDocumentsRequest(
            space=self._space(space),
            dir=dir,
            recursive=recursive,
            page_size=page_size,
            page_token=page_token,
        )
        response = await self._call(
            "StorageService.ListDocuments",
            self._stubs.storage.ListDocuments,
            request,
            idempotent=True,
        )
        return mapping.document_page(response)

    # --- SearchService ------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        spaces: Sequence[Space] = (),
        limit: int = 0,
        mode: str = "hybrid",
        path_prefix: str = "",
        min_score: float = 0.0,
        min_positions: Sequence[IndexPosition] = (),
        max_wait_ms: int = 0,
        min_relevance: float = 0.0,
        collapse_documents: bool = False,
    ) -> SearchResults:
        """Hybrid (or "lexical" / "semantic") search of up to 16 spaces (default: the
        client's space); `limit` 1..100 (0 = 5). `min_positions` (from write results):
        answer once the indexes hold those writes, waiting at most `max_wait_ms` (0 = the
        server's cap and this client's timeout); past it the answer is degraded.
        `min_relevance`: no hits unless one is at least this likely relevant (0 = off);
        `collapse_documents` keeps each document's best chunk only."""
        search_mode = mapping.SEARCH_MODES.get(mode)
        if search_mode is None:
            raise InvalidArgument(
                f"mode {mode!r} is not one of {', '.join(mapping.SEARCH_MODES)}", field="mode"
            )
        request = search_pb2.SearchRequest(
            spaces=[mapping.space_to_proto(s) for s in (spaces or (self.space,))],
            query=query,
            limit=limit,
            mode=search_mode,
            path_prefix=path_prefix,
            min_score=min_score,
            min_positions=[position_to_proto(p) for p in min_positions],
            max_wait_ms=max_wait_ms,
            min_relevance=min_relevance,
            collapse_documents=collapse_documents,
        )
        response = await self._call(
            "SearchService.Search", self._stubs.search.Search, request, idempotent=True
        )
        return mapping.search_results(response)
