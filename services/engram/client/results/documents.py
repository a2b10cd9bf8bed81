"""StorageService's documents: what read_document and write_document (and the upkeep
scan) return."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram.client.mapping import optional_position, optional_time, space_from_proto
from engram.client.models import Space
from engram.domain.positions import IndexPosition

if TYPE_CHECKING:
    from engram.v1 import document_pb2, storage_pb2


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


def document(message: document_pb2.Document) -> Document:
    return Document(
        space=space_from_proto(message.space),
        space_id=message.space_id,
        path=message.path,
        content=message.content,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        version=message.version,
        created_at=optional_time(message, "created_at"),
        updated_at=optional_time(message, "updated_at"),
        updated_by=message.updated_by,
        document_id=message.document_id,
        word_count=message.word_count,
    )


def document_write(message: storage_pb2.WriteDocumentResponse) -> DocumentWrite:
    return DocumentWrite(
        document=document(message.document),
        created=message.created,
        bytes_delta=message.bytes_delta,
        position=optional_position(message),
    )
