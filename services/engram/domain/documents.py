"""Document records as the storage ports exchange them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from engram.domain.spaces import SpaceRef


@dataclass(frozen=True, slots=True)
class DocumentHead:
    """What a write decides on besides content: a live document's metadata."""

    space: SpaceRef
    path: str
    sha256: str
    size_bytes: int
    version: int
    document_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A document's current state."""

    space: SpaceRef
    path: str
    content: str
    sha256: str
    size_bytes: int
    word_count: int
    version: int
    document_id: str
    created_at: datetime
    updated_at: datetime
    updated_by: str

    @property
    def space_id(self) -> str:
        return self.space.id

    @property
    def head(self) -> DocumentHead:
        return DocumentHead(
            space=self.space,
            path=self.path,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            version=self.version,
            document_id=self.document_id,
            created_at=self.created_at,
        )


@dataclass(frozen=True, slots=True)
class DocumentVersion:
    """One kept version of a document; `content` is empty in listings."""

    document_id: str
    version: int
    sha256: str
    size_bytes: int
    updated_at: datetime
    updated_by: str
    content: str = ""
    current: bool = False
    deleted: bool = False
    # Position in the version history (newer sorts higher); opaque to callers.
    seq: int = 0


@dataclass(frozen=True, slots=True)
class PathEntry:
    """A document in a listing."""

    path: str
    size_bytes: int
    updated_at: datetime


def byte_groups(entries: Sequence[PathEntry], budget: int) -> Iterator[list[PathEntry]]:
    """`entries` in order, cut into groups of at most `budget` bytes (a larger entry alone)."""
    group: list[PathEntry] = []
    held = 0
    for entry in entries:
        if group and held + entry.size_bytes > budget:
            yield group
            group, held = [], 0
        group.append(entry)
        held += entry.size_bytes
    if group:
        yield group


# The event id prefix of a reindex request: an event that names a document but is no change.
REINDEX_EVENT_PREFIX = "reindex-"


class EventOp(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"
    # The document and every kept version were erased (PurgeDocument).
    PURGE = "purge"
    # The whole space was erased (DeleteSpace); the event's path is empty.
    SPACE_DELETE = "space_delete"


def space_subject_token(space_id: str) -> str:
    """The space's token in event subjects: a space id may hold characters a NATS subject
    token may not ('.', '*', '>', spaces), so its hash stands in for it."""
    return hashlib.sha256(space_id.encode()).hexdigest()[:32]


def space_subject_filter(space_id: str) -> str:
    """The subject filter that matches every event of one space (the change feed's)."""
    return f"engram.docs.*.{space_subject_token(space_id)}"


@dataclass(frozen=True, slots=True)
class DocumentEvent:
    """What changed; recorded with the change (outbox) and published afterwards."""

    event_id: str
    space: SpaceRef
    path: str
    op: EventOp
    version: int
    sha256: str
    size_bytes: int
    at: datetime
    document_id: str
    # The W3C trace context (key, value) pairs of the write that made the change; () when
    # tracing is off. Opaque here: the runtime's tracing reads and writes it.
    trace_context: tuple[tuple[str, str], ...] = ()

    @property
    def space_id(self) -> str:
        return self.space.id

    @property
    def subject(self) -> str:
        """The JetStream subject: engram.docs.<op>.<space token>, so one space's events can
        be read alone (the change feed) while the indexer takes `engram.docs.>`."""
        return f"engram.docs.{self.op.value}.{space_subject_token(self.space_id)}"


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """A conditional create or replace: applies only if the stored version is `expected_version`.

    `expected_version` 0 means the document must not exist.
    """

    space: SpaceRef
    path: str
    content: str
    sha256: str
    size_bytes: int
    word_count: int
    expected_version: int
    document_id: str
    at: datetime
    by: str
    event_id: str
    # Carried into the event (see DocumentEvent.trace_context).
    trace_context: tuple[tuple[str, str], ...] = ()

    @property
    def new_version(self) -> int:
        return self.expected_version + 1

    def event(self) -> DocumentEvent:
        return DocumentEvent(
            event_id=self.event_id,
            space=self.space,
            path=self.path,
            op=EventOp.UPSERT,
            version=self.new_version,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            at=self.at,
            document_id=self.document_id,
            trace_context=self.trace_context,
        )

    def stored(self, created_at: datetime) -> StoredDocument:
        return StoredDocument(
            space=self.space,
            path=self.path,
            content=self.content,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            word_count=self.word_count,
            version=self.new_version,
            document_id=self.document_id,
            created_at=created_at,
            updated_at=self.at,
            updated_by=self.by,
        )


@dataclass(frozen=True, slots=True)
class DocumentDeletion:
    """A conditional delete of `expected_version`; the content is kept as a version."""

    space: SpaceRef
    path: str
    expected_version: int
    document_id: str
    sha256: str
    size_bytes: int
    at: datetime
    by: str
    event_id: str
    # Carried into the event (see DocumentEvent.trace_context).
    trace_context: tuple[tuple[str, str], ...] = ()

    def event(self) -> DocumentEvent:
        return DocumentEvent(
            event_id=self.event_id,
            space=self.space,
            path=self.path,
            op=EventOp.DELETE,
            version=self.expected_version,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            at=self.at,
            document_id=self.document_id,
            trace_context=self.trace_context,
        )


@dataclass(frozen=True, slots=True)
class Erasure:
    """A hard delete: the document at `path` (PurgeDocument) or, with an empty path, every
    document of the space (DeleteSpace), each with every kept version. Nothing is kept."""

    space: SpaceRef
    # "" = the whole space.
    path: str
    at: datetime
    by: str
    event_id: str
    trace_context: tuple[tuple[str, str], ...] = ()

    @property
    def whole_space(self) -> bool:
        return not self.path

    def event(
        self, *, document_id: str = "", version: int = 0, sha256: str = "", size_bytes: int = 0
    ) -> DocumentEvent:
        """The PURGE event (for the erased document's last state) or the SPACE_DELETE one."""
        return DocumentEvent(
            event_id=self.event_id,
            space=self.space,
            path=self.path,
            op=EventOp.SPACE_DELETE if self.whole_space else EventOp.PURGE,
            version=version,
            sha256=sha256,
            size_bytes=size_bytes,
            at=self.at,
            document_id=document_id,
            trace_context=self.trace_context,
        )


@dataclass(frozen=True, slots=True)
class ErasureResult:
    """What an erasure removed. Zero everywhere when nothing was stored (a repeated call)."""

    # Paths that held anything: a live document or kept versions.
    paths: int = 0
    # Live documents among them, and their bytes (what the quota gets back).
    live_documents: int = 0
    live_bytes: int = 0
    # Kept (non-current) versions erased.
    versions: int = 0

    @property
    def erased(self) -> bool:
        return self.paths > 0


@dataclass(frozen=True, slots=True)
class SpaceUsage:
    used_bytes: int
    document_count: int


@dataclass(frozen=True, slots=True)
class SpaceSummary:
    """A space that holds documents: how many, how large, and its latest change."""

    space: SpaceRef
    document_count: int
    used_bytes: int
    last_write_at: datetime

    @property
    def space_id(self) -> str:
        return self.space.id
