"""WorkspaceService's types: the results of the memory tools, the Heartbeat memory_write
takes, and their wire conversions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram.client.mapping import optional_position, optional_time, space_to_proto, timestamp
from engram.domain.positions import IndexPosition
from engram.v1 import workspace_pb2

if TYPE_CHECKING:
    from engram.client.models import Space
    from engram.domain.spaces import SpaceRef

TARGETS = {
    "memory": workspace_pb2.MEMORY_TARGET_MEMORY,
    "daily_log": workspace_pb2.MEMORY_TARGET_DAILY_LOG,
    "heartbeat": workspace_pb2.MEMORY_TARGET_HEARTBEAT,
}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What an agent reports about itself; the server renders it into HEARTBEAT.md."""

    last_seen: datetime | None = None
    session_id: str = ""
    surface: str = ""
    turn_count: int = 0
    open_loops: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The outcome of memory_write or append_daily_log."""

    path: str
    # UTF-8 bytes this write added (a daily-log entry with its "[HH:MM:SS] " prefix).
    content_length: int
    sha256: str
    version: int
    status: str = "written"
    append: bool = True
    # Size of the whole document after the write (0 when the server does not say).
    size_bytes: int = 0
    # Give it to memory_search(min_positions=...) to find this write on the first search
    # (None when the server does not say).
    position: IndexPosition | None = None


@dataclass(frozen=True, slots=True)
class MemoryDocument:
    path: str
    content: str
    word_count: int
    updated_at: datetime | None
    sha256: str
    version: int


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A file, or a directory (name and path ending in "/") with its children."""

    name: str
    path: str
    children: tuple[TreeNode, ...] = ()

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


@dataclass(frozen=True, slots=True)
class PromptSection:
    name: str
    path: str
    sha256: str


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    text: str
    sections: tuple[PromptSection, ...]
    # SOUL.md changed since the previous prompt assembled for this agent.
    soul_changed: bool
    # BOOTSTRAP.md exists: the prompt carries the onboarding instructions.
    bootstrapping: bool


@dataclass(frozen=True, slots=True)
class SeedResult:
    created_paths: tuple[str, ...]
    existing_paths: tuple[str, ...]


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
        position=optional_position(message),
    )


def daily_log_result(message: workspace_pb2.AppendDailyLogResponse) -> WriteResult:
    return WriteResult(
        path=message.path,
        content_length=message.content_length,
        sha256=message.sha256,
        version=message.version,
        position=optional_position(message),
    )


def memory_document(message: workspace_pb2.MemoryReadResponse) -> MemoryDocument:
    return MemoryDocument(
        path=message.path,
        content=message.content,
        word_count=message.word_count,
        updated_at=optional_time(message, "updated_at"),
        sha256=message.sha256,
        version=message.version,
    )


def tree_node(message: workspace_pb2.TreeNode) -> TreeNode:
    return TreeNode(
        name=message.name,
        path=message.path,
        children=tuple(tree_node(child) for child in message.children),
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
