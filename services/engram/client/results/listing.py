"""A directory listing: what list_documents returns (apart from the documents' own
module, so that `engram ls` makes only these two classes)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram.client.mapping import optional_time

if TYPE_CHECKING:
    from engram.v1 import storage_pb2


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


def document_page(message: storage_pb2.ListDocumentsResponse) -> DocumentPage:
    return DocumentPage(
        entries=tuple(
            DirectoryEntry(
                path=entry.path,
                is_dir=entry.is_dir,
                size_bytes=entry.size_bytes,
                updated_at=optional_time(entry, "updated_at"),
            )
            for entry in message.entries
        ),
        next_page_token=message.next_page_token,
    )
