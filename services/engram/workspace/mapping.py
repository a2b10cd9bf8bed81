"""WorkspaceService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from datetime import datetime

from engram.domain.errors import InvalidArgument
from engram.domain.heartbeat import HeartbeatFields
from engram.domain.prompt import AssembledPrompt, PromptLayout
from engram.domain.workspace import Target, TreeNode
from engram.search.mapping import wait_seconds
from engram.v1 import position_pb2, workspace_pb2
from engram.wire import (
    from_timestamp,
    position_from_proto,
    position_to_proto,
    requested_space,
    timestamp,
)
from engram.workspace.ports import MemoryHits, PositionWait, WorkspaceDocument
from engram.workspace.service import WriteOutcome, WriteRequest

WRITTEN = "written"

TARGETS = {
    # Unset: the daily log, the tool's default target.
    workspace_pb2.MEMORY_TARGET_UNSPECIFIED: Target.DAILY_LOG,
    workspace_pb2.MEMORY_TARGET_MEMORY: Target.MEMORY,
    workspace_pb2.MEMORY_TARGET_DAILY_LOG: Target.DAILY_LOG,
    workspace_pb2.MEMORY_TARGET_HEARTBEAT: Target.HEARTBEAT,
    workspace_pb2.MEMORY_TARGET_PATH: Target.PATH,
}

# Unset (and unknown values): the server's default layout.
PROMPT_LAYOUTS: dict[int, PromptLayout] = {
    workspace_pb2.PROMPT_LAYOUT_SEED_000: PromptLayout.SEED_000,
    workspace_pb2.PROMPT_LAYOUT_SEED_004: PromptLayout.SEED_004,
}


def write_request(request: workspace_pb2.MemoryWriteRequest) -> WriteRequest:
    target = TARGETS.get(request.target)
    if target is None:
        raise InvalidArgument(
            "target must be MEMORY_TARGET_MEMORY, _DAILY_LOG, _HEARTBEAT or _PATH",
            field="target",
        )
    if target is not Target.PATH and request.path:
        raise InvalidArgument(
            "path is only used with target MEMORY_TARGET_PATH; leave it empty or set the target",
            field="path",
        )
    return WriteRequest(
        space=requested_space(request.space),
        content=request.content,
        target=target,
        path=request.path,
        append=request.append if request.HasField("append") else True,
        time_zone=request.time_zone,
        session=request.session,
        heartbeat=heartbeat_fields(request.heartbeat) if request.HasField("heartbeat") else None,
    )


def heartbeat_fields(message: workspace_pb2.Heartbeat) -> HeartbeatFields:
    """Unset fields stay out of the block (turn_count 0 = not reported)."""
    return HeartbeatFields(
        last_seen=_last_seen(message) if message.HasField("last_seen") else None,
        session_id=message.session_id,
        surface=message.surface,
        turn_count=message.turn_count or None,
        open_loops=tuple(message.open_loops),
    )


def write_response(outcome: WriteOutcome) -> workspace_pb2.MemoryWriteResponse:
    return workspace_pb2.MemoryWriteResponse(
        path=outcome.path,
        size_bytes=outcome.size_bytes,
        sha256=outcome.sha256,
        status=WRITTEN,
        append=outcome.append,
        content_length=outcome.content_length,
        version=outcome.version,
        position=_position(outcome),
    )


def append_response(outcome: WriteOutcome) -> workspace_pb2.AppendDailyLogResponse:
    return workspace_pb2.AppendDailyLogResponse(
        path=outcome.path,
        content_length=outcome.content_length,
        sha256=outcome.sha256,
        version=outcome.version,
        position=_position(outcome),
    )


def read_response(document: WorkspaceDocument) -> workspace_pb2.MemoryReadResponse:
    return workspace_pb2.MemoryReadResponse(
        path=document.path,
        content=document.content,
        word_count=document.word_count,
        updated_at=timestamp(document.updated_at),
        sha256=document.sha256,
        version=document.version,
    )


def tree_node(node: TreeNode) -> workspace_pb2.TreeNode:
    return workspace_pb2.TreeNode(
        name=node.name, path=node.path, children=[tree_node(child) for child in node.children]
    )


def search_response(query: str, found: MemoryHits) -> workspace_pb2.MemorySearchResponse:
    return workspace_pb2.MemorySearchResponse(
        query=query,
        hits=[
            workspace_pb2.MemorySearchHit(
                path=hit.path,
                content=hit.content,
                score=hit.score,
                document_id=hit.document_id,
                is_hybrid_match=hit.is_hybrid_match,
                chunk_id=hit.chunk_id,
                relevance=hit.relevance,
            )
            for hit in found.hits
        ],
        result_count=len(found.hits),
        degraded=found.degraded,
        degraded_reasons=found.degraded_reasons,
        keyword_positions_behind=found.keyword_positions_behind,
        vector_positions_behind=found.vector_positions_behind,
        waited_ms=round(found.waited_seconds * 1000),
    )


def position_wait(
    request: workspace_pb2.MemorySearchRequest, deadline_seconds: float | None
) -> PositionWait:
    return PositionWait(
        positions=[position_from_proto(p) for p in request.min_positions],
        max_wait_seconds=wait_seconds(request.max_wait_ms),
        deadline_seconds=deadline_seconds,
    )


def _position(outcome: WriteOutcome) -> position_pb2.IndexPosition | None:
    return None if outcome.position is None else position_to_proto(outcome.position)


def _last_seen(message: workspace_pb2.Heartbeat) -> datetime:
    try:
        return from_timestamp(message.last_seen)
    except ValueError:
        raise InvalidArgument(
            "heartbeat.last_seen must lie in years 1 to 9999, with nanos in 0..999,999,999",
            field="heartbeat.last_seen",
        ) from None


def prompt_response(prompt: AssembledPrompt) -> workspace_pb2.GetSystemPromptResponse:
    return workspace_pb2.GetSystemPromptResponse(
        prompt=prompt.text,
        sections=[
            workspace_pb2.PromptSection(name=s.name, path=s.path, sha256=s.sha256)
            for s in prompt.sections
        ],
        soul_changed=prompt.soul_changed,
        bootstrapping=prompt.bootstrapping,
    )
