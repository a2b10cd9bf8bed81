"""What the client takes and returns: frozen dataclasses, no protobuf."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engram.domain.errors import InvalidSpaceRef
from engram.domain.positions import IndexPosition
from engram.v1 import space_pb2

# "private", "bot", "project", ...: the proto's Visibility names, lower case, unprefixed.
VISIBILITIES = tuple(
    name.removeprefix("VISIBILITY_").lower()
    for name in space_pb2.Visibility.keys()
    if name != "VISIBILITY_UNSPECIFIED"
)


@dataclass(frozen=True, slots=True)
class Space:
    """A space (one agent workspace). Tenant and user default to the caller's own."""

    visibility: str = "private"
    name: str = "default"
    project: str = ""
    bot: str = ""
    user: str = ""
    tenant: str = ""

    def __post_init__(self) -> None:
        if self.visibility not in VISIBILITIES:
            raise InvalidSpaceRef(
                f"visibility {self.visibility!r} is not one of {', '.join(VISIBILITIES)}",
                field="space.visibility",
            )


# --- workspace --------------------------------------------------------------------------------


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
class SearchHit:
    """One chunk found. memory_search fills path, content, score, document_id,
    is_hybrid_match and chunk_id; SearchService fills every field."""

    path: str
    content: str
    score: float
    document_id: str
    is_hybrid_match: bool
    chunk_id: str = ""
    space_id: str = ""
    chunk_index: int = 0
    bm25_score: float = 0.0
    vector_score: float = 0.0
    # 1-based rank in each index's list (0 = not in it).
    bm25_rank: int = 0
    vector_rank: int = 0
    # Calibrated probability in [0, 1] that the hit is relevant, comparable across queries.
    relevance: float = 0.0


@dataclass(frozen=True, slots=True)
class SearchResults:
    query: str
    results: tuple[SearchHit, ...]
    result_count: int
    # One backend failed or timed out and the other answered, or an index had not
    # reached the given min_positions when the wait ended.
    degraded: bool = False
    degraded_reasons: tuple[str, ...] = ()
    # min_positions each index had not reached, and the time the search waited for them.
    keyword_positions_behind: int = 0
    vector_positions_behind: int = 0
    waited_ms: int = 0


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


# --- storage ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Document:
    """A stored document (content is "" in a write's answer)."""

    space: Space
    space_id: str
    path: str
    content: str
    sha256: str
    size_bytes: int
    version: int
    created_at: datetime | None
    updated_at: datetime | None
    updated_by: str
    document_id: str
    word_count: int


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    document: Document
    # This write created the document.
    created: bool
    # New size minus old size.
    bytes_delta: int
    # Give it to search(min_positions=...) to find this write on the first search.
    position: IndexPosition | None = None


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    path: str
    is_dir: bool
    size_bytes: int
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class DocumentPage:
    entries: tuple[DirectoryEntry, ...]
    # Empty when there is nothing more; pass it back as page_token for the next page.
    next_page_token: str = ""
