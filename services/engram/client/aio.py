"""EngramClient (also `AsyncClient`): engram's typed asyncio client (grpc.aio) for every RPC
of the seven services, for agents, applications and engram's own services.

The calls are grouped by service in mixins (engram.client.storage, .search, .quota, .authz,
.indexer, .maintenance; the WorkspaceService calls are here), all standing on
engram.client.base, which holds the channel, deadlines, retries and error mapping.

Replicas: `addr` is one `host:port`, several replicas' `ip:port` (a list, or one string
"127.0.0.1:50061,127.0.0.1:50062"), or a `dns:///name:port` target whose name resolves to
each replica (a headless Kubernetes Service). Several replicas are balanced round-robin
(gRPC's `round_robin` policy over one channel): a replica that goes down is left out once
its connection fails, and the calls it was serving fail UNAVAILABLE, which the retries
below send to another replica.

Retries: a call that fails with UNAVAILABLE (the server down or restarting, a dropped link,
a backend engram reports unavailable) is retried with exponential backoff and jitter, up to
`retries` more times, only when repeating it cannot apply a change twice:

- always: reads, listings, searches, status and usage reports, authentication and
  authorization checks, `memory_read`, `memory_tree`, `memory_search`, `seed_workspace`
  (create-only writes), `system_prompt`, and the calls idempotent by definition:
  `purge_document`, `delete_space`, `revoke_token`, `reconcile`, and the setters of a value
  (`set_tenant_quota`, `set_org_quota`, `set_tenant_org`, `set_space_maintenance`);
- writes that set a whole document: `write_document` in replace mode (with or without
  `expected_sha256` / `create_only`: a repeat leaves the same content) and `memory_write`
  with `append=False`. A conditional write whose first attempt landed unseen answers
  `EtagMismatch` on the repeat, its `current_sha256` equal to the content's sha256;
- guarded writes: `write_document(append=True)` with `expected_sha256` or `create_only`,
  `delete_document` with `expected_sha256` (a repeat after an attempt that landed unseen
  cannot apply twice: it answers `EtagMismatch` or `NotFound`, which the caller resolves by
  reading), and `charge`, whose idempotency key makes a repeat apply once;
- never: unconditional appends (`write_document(append=True)` without a condition,
  `memory_write` appending, the default, and `append_daily_log`), unconditional
  `delete_document`, `complete_bootstrap`, `create_token`, `record_audit_event`, `reindex`,
  `run_job` and imports: the server keeps no request ids for them, so a repeat after a lost
  answer could apply the change twice or answer NOT_FOUND for a change that happened. These
  raise `Unavailable` for the caller to decide (the change may or may not have been made).

Streams: an export is reopened on UNAVAILABLE before its first chunk; `watch_space`
resumes from the last cursor it yielded whenever the server goes away, for as long as the
caller keeps reading (`retries` bounds only a server that never answered).

Every other failure raises at once as its engram.domain.errors class (InvalidArgument,
NotFound, PermissionDenied with `rule`, EtagMismatch, QuotaExceeded, RateLimited with
`retry_after_seconds`, Unauthenticated, Unavailable ...); grpc.RpcError never escapes.
`timeout` is each attempt's deadline in seconds (30 by default); exports and imports are
bounded by `stream_timeout` (10 minutes) as a whole, and a watch by nothing. For one call's
own deadline: `client.with_options(timeout=2).read_document(...)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

from engram.client.authz import AuthzCalls
from engram.client.base import DEFAULT_ADDR as DEFAULT_ADDR
from engram.client.base import AnySpace
from engram.client.indexer import IndexerCalls
from engram.client.maintenance import MaintenanceCalls
from engram.client.mapping import position_to_proto
from engram.client.quota import QuotaCalls
from engram.client.search import SearchCalls
from engram.client.storage import StorageCalls
from engram.client.upkeep import UpkeepCalls
from engram.domain.errors import InvalidArgument
from engram.domain.positions import IndexPosition
from engram.v1 import workspace_pb2, workspace_pb2_grpc

if TYPE_CHECKING:
    from engram.client.results.search import SearchResults
    from engram.client.results.workspace import (
        Heartbeat,
        MemoryDocument,
        SeedResult,
        SystemPrompt,
        TreeNode,
        WriteResult,
    )


def _workspace(channel: grpc.aio.Channel) -> workspace_pb2_grpc.WorkspaceServiceAsyncStub:
    return workspace_pb2_grpc.WorkspaceServiceStub(channel)


# system_prompt(layout=...): the seeds' prompt orders ("" = the server's default).
PROMPT_LAYOUTS = {
    "": workspace_pb2.PROMPT_LAYOUT_UNSPECIFIED,
    "000": workspace_pb2.PROMPT_LAYOUT_SEED_000,
    "004": workspace_pb2.PROMPT_LAYOUT_SEED_004,
}


class EngramClient(
    StorageCalls,
    UpkeepCalls,
    SearchCalls,
    QuotaCalls,
    AuthzCalls,
    IndexerCalls,
    MaintenanceCalls,
):
    """Async client of an engram server (or of several replicas, balanced round-robin):
    every RPC of WorkspaceService (the memory tools), StorageService, SearchService,
    QuotaService, AuthzService, IndexerService and MaintenanceService. Each method that
    addresses a space takes `space=` to override the default.

    Use it as `async with EngramClient(addr, token=..., space=Space(name="agent-1")) as c:`;
    the channel opens on the first call, inside the running event loop.
    """

    def _space_of(self, space: AnySpace | None) -> AnySpace:
        return space or self.space

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
        space: AnySpace | None = None,
    ) -> WriteResult:
        """Writes `content` to `target`: "daily_log" (today's daily/YYYY-MM-DD.md, the entry
        timestamped), "memory" (MEMORY.md), "heartbeat" (HEARTBEAT.md) or a custom .md path.
        `append` defaults to True on the server; False replaces the document."""
        from engram.client.results.workspace import memory_write_request, write_result

        request = memory_write_request(
            self._space_of(space),
            content,
            target=target,
            append=append,
            time_zone=time_zone,
            session=session,
            heartbeat=heartbeat,
        )
        response = await self._call(
            "WorkspaceService.MemoryWrite",
            self._stub(_workspace).MemoryWrite,
            request,
            idempotent=append is False,
        )
        return write_result(response)

    async def memory_read(
        self,
        path: str = "",
        *,
        space: AnySpace | None = None,
        date: str = "",
        time_zone: str = "",
        session: str = "",
    ) -> MemoryDocument:
        """Reads a workspace document; NotFound names the path. Or, with `date` ("today",
        "yesterday", YYYY-MM-DD in `time_zone`) and no path, that day's log (`session`: that
        surface's journal)."""
        request = workspace_pb2.MemoryReadRequest(
            space=self._space(space), path=path, date=date, time_zone=time_zone, session=session
        )
        response = await self._call(
            "WorkspaceService.MemoryRead",
            self._stub(_workspace).MemoryRead,
            request,
            idempotent=True,
        )
        from engram.client.results.workspace import memory_document

        return memory_document(response)

    async def memory_tree(
        self, path: str = "", *, depth: int = 0, space: AnySpace | None = None
    ) -> list[TreeNode]:
        """The workspace (or the directory `path`) as a tree, `depth` 1..10 levels (0 = 1)."""
        request = workspace_pb2.MemoryTreeRequest(space=self._space(space), path=path, depth=depth)
        response = await self._call(
            "WorkspaceService.MemoryTree",
            self._stub(_workspace).MemoryTree,
            request,
            idempotent=True,
        )
        from engram.client.results.workspace import tree_node

        return [tree_node(node) for node in response.nodes]

    async def memory_search(
        self,
        query: str,
        *,
        limit: int = 0,
        space: AnySpace | None = None,
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
            self._stub(_workspace).MemorySearch,
            request,
            idempotent=True,
        )
        from engram.client.results.search import memory_search_results

        return memory_search_results(response)

    async def append_daily_log(
        self, entry: str, *, time_zone: str = "", session: str = "", space: AnySpace | None = None
    ) -> WriteResult:
        """Appends one "[HH:MM:SS] entry" line to today's daily log (never retried)."""
        request = workspace_pb2.AppendDailyLogRequest(
            space=self._space(space), entry=entry, time_zone=time_zone, session=session
        )
        response = await self._call(
            "WorkspaceService.AppendDailyLog",
            self._stub(_workspace).AppendDailyLog,
            request,
            idempotent=False,
        )
        from engram.client.results.workspace import daily_log_result

        return daily_log_result(response)

    async def system_prompt(
        self,
        *,
        group_context: bool = False,
        time_zone: str = "",
        space: AnySpace | None = None,
        layout: str = "",
    ) -> SystemPrompt:
        """The assembled system prompt; `layout` "000" or "004" orders its sections as that
        seed does ("" = the server's default). Retried on UNAVAILABLE: if an attempt
        assembled the prompt but its answer was lost, a one-time SOUL.md notice it carried
        is lost too."""
        if layout not in PROMPT_LAYOUTS:
            raise InvalidArgument(
                f"layout {layout!r} is not one of 000, 004 (or empty)", field="layout"
            )
        request = workspace_pb2.GetSystemPromptRequest(
            space=self._space(space),
            group_context=group_context,
            time_zone=time_zone,
            layout=PROMPT_LAYOUTS[layout],
        )
        response = await self._call(
            "WorkspaceService.GetSystemPrompt",
            self._stub(_workspace).GetSystemPrompt,
            request,
            idempotent=True,
        )
        from engram.client.results.workspace import system_prompt

        return system_prompt(response)

    async def seed_workspace(self, *, space: AnySpace | None = None) -> SeedResult:
        """Copies the default templates into the workspace, never overwriting a file."""
        request = workspace_pb2.SeedWorkspaceRequest(space=self._space(space))
        response = await self._call(
            "WorkspaceService.SeedWorkspace",
            self._stub(_workspace).SeedWorkspace,
            request,
            idempotent=True,
        )
        from engram.client.results.workspace import seed_result

        return seed_result(response)

    async def complete_bootstrap(self, *, space: AnySpace | None = None) -> str:
        """Archives BOOTSTRAP.md; returns where it now lives. NotFound without one."""
        request = workspace_pb2.CompleteBootstrapRequest(space=self._space(space))
        response = await self._call(
            "WorkspaceService.CompleteBootstrap",
            self._stub(_workspace).CompleteBootstrap,
            request,
            idempotent=False,
        )
        return response.archived_path
