"""Protobuf <-> the client's dataclasses, in one place."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from engram.client.models import (
    DirectoryEntry,
    Document,
    DocumentPage,
    DocumentWrite,
    Heartbeat,
    MemoryDocument,
    PromptSection,
    SearchHit,
    SearchResults,
    SeedResult,
    Space,
    SystemPrompt,
    TreeNode,
    WriteResult,
)
from engram.domain.positions import IndexPosition
from engram.v1 import (
    document_pb2,
    search_pb2,
    space_pb2,
    storage_pb2,
    workspace_pb2,
)
from engram.wire import from_timestamp, position_from_proto, timestamp

TARGETS = {
    "memory": workspace_pb2.MEMORY_TARGET_MEMORY,
    "daily_log": workspace_pb2.MEMORY_TARGET_DAILY_LOG,
    "heartbeat": workspace_pb2.MEMORY_TARGET_HEARTBEAT,
}
SEARCH_MODES = {
    "hybrid": search_pb2.SEARCH_MODE_HYBRID,
    "lexical": search_pb2.SEARCH_MODE_LEXICAL,
    "semantic": search_pb2.SEARCH_MODE_SEMANTIC,
}


def space_to_proto(space: Space) -> space_pb2.SpaceRef:
    return space_pb2.SpaceRef(
        visibility=space_pb2.Visibility.Value(f"VISIBILITY_{space.visibility.upper()}"),
        name=space.name,
        project=space.project,
        bot=space.bot,
        user=space.user,
        tenant=space.tenant,
    )


def space_from_proto(message: space_pb2.SpaceRef) -> Space:
    name = space_pb2.Visibility.Name(message.visibility).removeprefix("VISIBILITY_").lower()
    return Space(
        visibility=name if name != "unspecified" else "private",
        name=message.name,
        project=message.project,
        bot=message.bot,
        user=message.user,
        tenant=message.tenant,
    )


def _time(message: Timestamp, present: bool) -> datetime | None:
    return from_timestamp(message) if present else None


# --- workspace --------------------------------------------------------------------------------


def memory_write_request(
    space: Space,
    content: str,
    *,
    target: str,
    append: bool | None,
    time_zone: str,
    session: str,
    heartbeat: Heartbeat | None,
) -> workspace_pb2.MemoryWriteRequest:
    request = workspace_pb2.MemoryWriteRequest(
        space=space_to_proto(space),
        content=content,
        time_zone=time_zone,
        session=session,
    )
    named = TARGETS.get(target)
    if named is None:
        request.target = workspace_pb2.MEMORY_TARGET_PATH
        request.path = target
    else:
        request.target = named
    if append is not None:
        request.append = append
    if heartbeat is not None:
        request.heartbeat.CopyFrom(heartbeat_to_proto(heartbeat))
    return request


def heartbeat_to_proto(heartbeat: Heartbeat) -> workspace_pb2.Heartbeat:
    message = workspace_pb2.Heartbeat(
        session_id=heartbeat.session_id,
        surface=heartbeat.surface,
        turn_count=heartbeat.turn_count,
        open_loops=list(heartbeat.open_loops),
    )
    if heartbeat.last_seen is not None:
        message.last_seen.CopyFrom(timestamp(heartbeat.last_seen))
    return message


def write_result(message: workspace_pb2.MemoryWriteResponse) -> WriteResult:
    return WriteResult(
        path=message.path,
        content_length=message.content_length,
        sha256=message.sha256,
        version=message.version,
        status=message.status or "written",
        append=message.append,
        size_bytes=message.size_bytes,
        position=_position(message),
    )


def daily_log_result(message: workspace_pb2.AppendDailyLogResponse) -> WriteResult:
    return WriteResult(
        path=message.path,
        content_length=message.content_length,
        sha256=message.sha256,
        version=message.version,
        position=_position(message),
    )


def _position(
    message: workspace_pb2.MemoryWriteResponse
    | workspace_pb2.AppendDailyLogResponse
    | storage_pb2.WriteDocumentResponse,
) -> IndexPosition | None:
    return position_from_proto(message.position) if message.HasField("position") else None


def memory_document(message: workspace_pb2.MemoryReadResponse) -> MemoryDocument:
    return MemoryDocument(
        path=message.path,
        content=message.content,
        word_count=message.word_count,
        updated_at=_time(message.updated_at, message.HasField("updated_at")),
        sha256=message.sha256,
        version=message.version,
    )


def tree_node(message: workspace_pb2.TreeNode) -> TreeNode:
    return TreeNode(
        name=message.name,
        path=message.path,
        children=tuple(tree_node(child) for child in message.children),
    )


def memory_search_results(message: workspace_pb2.MemorySearchResponse) -> SearchResults:
    return SearchResults(
        query=message.query,
        results=tuple(
            SearchHit(
                path=hit.path,
                content=hit.content,
                score=hit.score,
                document_id=hit.document_id,
                is_hybrid_match=hit.is_hybrid_match,
                chunk_id=hit.chunk_id,
                relevance=hit.relevance,
            )
            for hit in message.hits
        ),
        result_count=message.result_count,
        degraded=message.degraded,
        degraded_reasons=tuple(message.degraded_reasons),
        keyword_positions_behind=message.keyword_positions_behind,
        vector_positions_behind=message.vector_positions_behind,
        waited_ms=message.waited_ms,
    )


def system_prompt(message: workspace_pb2.GetSystemPromptResponse) -> SystemPrompt:
    return SystemPrompt(
        text=message.prompt,
        sections=tuple(
            PromptSection(name=section.name, path=section.path, sha256=section.sha256)
            for section in message.sections
        ),
        soul_changed=message.soul_changed,
        bootstrapping=message.bootstrapping,
    )


def seed_result(message: workspace_pb2.SeedWorkspaceResponse) -> SeedResult:
    return SeedResult(
        created_paths=tuple(message.created_paths),
        existing_paths=tuple(message.existing_paths),
    )


# --- storage and search -----------------------------------------------------------------------


def document(message: document_pb2.Document) -> Document:
    return Document(
        space=space_from_proto(message.space),
        space_id=message.space_id,
        path=message.path,
        content=message.content,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        version=message.version,
        created_at=_time(message.created_at, message.HasField("created_at")),
        updated_at=_time(message.updated_at, message.HasField("updated_at")),
        updated_by=message.updated_by,
        document_id=message.document_id,
        word_count=message.word_count,
    )


def document_write(message: storage_pb2.WriteDocumentResponse) -> DocumentWrite:
    return DocumentWrite(
        document=document(message.document),
        created=message.created,
        bytes_delta=message.bytes_delta,
        position=_position(message),
    )


def document_page(message: storage_pb2.ListDocumentsResponse) -> DocumentPage:
    return DocumentPage(
        entries=tuple(
            DirectoryEntry(
                path=entry.path,
                is_dir=entry.is_dir,
                size_bytes=entry.size_bytes,
                updated_at=_time(entry.updated_at, entry.HasField("updated_at")),
            )
            for entry in message.entries
        ),
        next_page_token=message.next_page_token,
    )


def search_results(message: search_pb2.SearchResponse) -> SearchResults:
    return SearchResults(
        query=message.query,
        results=tuple(
            SearchHit(
                path=result.path,
                content=result.content,
                score=result.score,
                document_id=result.document_id,
                is_hybrid_match=result.is_hybrid_match,
                chunk_id=result.chunk_id,
                space_id=result.space_id,
                chunk_index=result.chunk_index,
                bm25_score=result.bm25_score,
                vector_score=result.vector_score,
                relevance=result.relevance,
            )
            for result in message.results
        ),
        result_count=message.result_count,
        degraded=message.degraded,
        degraded_reasons=tuple(message.degraded_reasons),
        keyword_positions_behind=message.keyword_positions_behind,
        vector_positions_behind=message.vector_positions_behind,
        waited_ms=message.waited_ms,
    )
