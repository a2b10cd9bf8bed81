"""A document's kept versions: what list_document_versions returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram.client.mapping import optional_time

if TYPE_CHECKING:
    from engram.v1 import document_pb2


@dataclass(frozen=True, slots=True)
class DocumentVersion:
    document_id: str
    version: int
    sha256: str
    size_bytes: int
    updated_at: datetime | None
    updated_by: str
    # The document's current version.
    current: bool
    # The last version before the document was deleted.
    deleted: bool


def document_version(message: document_pb2.DocumentVersion) -> DocumentVersion:
    return DocumentVersion(
        document_id=message.document_id,
        version=message.version,
        sha256=message.sha256,
        size_bytes=message.size_bytes,
        updated_at=optional_time(message, "updated_at"),
        updated_by=message.updated_by,
        current=message.current,
        deleted=message.deleted,
    )
