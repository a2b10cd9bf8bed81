"""The document tables and their rows as domain values."""

from __future__ import annotations

from typing import Any

from engram.backends.sqlite import from_micros
from engram.domain.documents import DocumentVersion, StoredDocument
from engram.domain.spaces import parse_space_id

DOCUMENT_TABLES = """
CREATE TABLE IF NOT EXISTS documents (
    id          INTEGER PRIMARY KEY,
    space_id    TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    content     TEXT    NOT NULL,
    sha256      TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    word_count  INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    created_us  INTEGER NOT NULL,
    updated_us  INTEGER NOT NULL,
    updated_by  TEXT    NOT NULL,
    UNIQUE (space_id, path)
);
CREATE INDEX IF NOT EXISTS documents_by_tenant ON documents (tenant, space_id);
CREATE TABLE IF NOT EXISTS document_versions (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    space_id    TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    content     TEXT    NOT NULL,
    sha256      TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    updated_us  INTEGER NOT NULL,
    updated_by  TEXT    NOT NULL,
    deleted     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS document_versions_by_path
    ON document_versions (space_id, path, seq);
"""


DOCUMENT_COLUMNS = (
    "space_id, path, content, sha256, size_bytes, word_count, version, document_id, "
    "created_us, updated_us, updated_by"
)


def document_of(row: Any) -> StoredDocument:
    (
        space_id,
        path,
        content,
        sha256,
        size_bytes,
        words,
        version,
        document_id,
        created_us,
        updated_us,
        updated_by,
    ) = row
    return StoredDocument(
        space=parse_space_id(str(space_id)),
        path=str(path),
        content=str(content),
        sha256=str(sha256),
        size_bytes=int(size_bytes),
        word_count=int(words),
        version=int(version),
        document_id=str(document_id),
        created_at=from_micros(int(created_us)),
        updated_at=from_micros(int(updated_us)),
        updated_by=str(updated_by),
    )


def version_of(row: Any, *, with_content: bool) -> DocumentVersion:
    seq, document_id, version, sha256, size_bytes, updated_us, updated_by, deleted, content = row
    return DocumentVersion(
        document_id=str(document_id),
        version=int(version),
        sha256=str(sha256),
        size_bytes=int(size_bytes),
        updated_at=from_micros(int(updated_us)),
        updated_by=str(updated_by),
        content=str(content) if with_content else "",
        deleted=bool(deleted),
        seq=int(seq),
    )
