"""Protobuf <-> the client's dataclasses, in one place."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from google.protobuf.message import Message
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
from engram.domain.errors import InvalidSpaceRef
from engram.domain.positions import IndexPosition

if TYPE_CHECKING:
    from engram.domain.spaces import SpaceRef

from engram.v1 import (
    document_pb2,
    position_pb2,
    search_pb2,
    space_pb2,
    storage_pb2,
    workspace_pb2,
)

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


# Visibility numbers and the client's names for them ("private", "cross_project" ...).
VISIBILITY_NAMES: dict[int, str] = {
    number: name.removeprefix("VISIBILITY_").lower()
    for name, number in space_pb2.Visibility.items()
    if number != space_pb2.VISIBILITY_UNSPECIFIED
}
VISIBILITY_NUMBERS = {
    name: space_pb2.Visibility.ValueType(number) for number, name in VISIBILITY_NAMES.items()
}


def space_to_proto(space: Space | SpaceRef) -> space_pb2.SpaceRef:
    """The wire's SpaceRef for the client's Space or the domain's SpaceRef (engram's own
    services hold those; its visibility is an enum whose value is the same name). Both are
    frozen, so the message is built once per space and shared: callers copy it into their
    requests (a message given to a constructor or CopyFrom is copied), never change it."""
    return _space_message(space)


@functools.lru_cache(maxsize=1024)
def _space_message(space: Space | SpaceRef) -> space_pb2.SpaceRef:
    visibility = space.visibility if isinstance(space, Space) else space.visibility.value
    number = VISIBILITY_NUMBERS.get(visibility)
    if number is None:
        raise InvalidSpaceRef(f"visibility {visibility!r} is unknown", field="space.visibility")
    return space_pb2.SpaceRef(
        visibility=number,
        name=space.name,
        project=space.project,
        bot=space.bot,
        user=space.user,
        tenant=space.tenant,
    )


def space_from_proto(message: space_pb2.SpaceRef) -> Space:
    return _space(
        message.visibility, message.name, message.project, message.bot, message.user,
        message.tenant,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _space(visibility: int, name: str, project: str, bot: str, user: str, tenant: str) -> Space:
    """Spaces come back on every answer, mostly the same few: each is made once."""
    return Space(
        visibility=VISIBILITY_NAMES.get(visibility, "private"),
        name=name,
        project=project,
        bot=bot,
        user=user,
        tenant=tenant,
    )


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


def timestamp(moment: datetime) -> Timestamp:
    """An aware datetime (a naive one is taken as UTC) as a protobuf Timestamp."""
    stamp = Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return stamp


def position_to_proto(position: IndexPosition) -> position_pb2.IndexPosition:
    return position_pb2.IndexPosition(
        space_id=position.space_id,
        path=position.path,
        document_id=position.document_id,
        version=position.version,
    )


def position_from_proto(message: position_pb2.IndexPosition) -> IndexPosition:
    return IndexPosition(
        space_id=message.space_id,
        path=message.path,
        document_id=message.document_id,
        version=message.version,
    )


def _time(message: Timestamp, present: bool) -> datetime | None:
    return from_timestamp(message) if present else None


def optional_time(message: Message, field: str) -> datetime | None:
    """The message's timestamp `field` as a datetime; None when unset."""
    return from_timestamp(getattr(message, field)) if message.HasField(field) else None


# --- workspace --------------------------------------------------------------------------------


def memory_write_request(
    space: Space | SpaceRef,
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
                bm25_rank=result.bm25_rank,
                vector_rank=result.vector_rank,
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
