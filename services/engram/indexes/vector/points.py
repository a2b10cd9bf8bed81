"""What both Qdrant adapters (the server through qdrant-client, and Qdrant Edge in process)
store per chunk: a point id derived from the chunk id, and the chunk's fields as payload."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from engram.domain.chunks import Chunk
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import PATH_SCOPES_FIELD

# Point ids are UUID5s of the chunk id in this namespace (stable across processes).
POINT_NAMESPACE = uuid.UUID("6f1d2a4e-5c1b-4f55-9e0a-3c7f5c2e9a11")


def point_id(chunk_id: str) -> str:
    return str(uuid.uuid5(POINT_NAMESPACE, chunk_id))


def payload(chunk: Chunk, scopes: list[str]) -> dict[str, Any]:
    return {
        "space_id": chunk.space_id,
        "tenant": chunk.tenant,
        "path": chunk.path,
        PATH_SCOPES_FIELD: scopes,
        "document_id": chunk.document_id,
        "chunk_id": chunk.chunk_id,
        "chunk_index": chunk.chunk_index,
        "doc_version": chunk.doc_version,
        "content": chunk.content,
    }


def chunk_of(stored: Mapping[str, Any]) -> Chunk:
    return Chunk(
        chunk_id=str(stored["chunk_id"]),
        document_id=str(stored["document_id"]),
        space_id=str(stored["space_id"]),
        tenant=str(stored["tenant"]),
        path=str(stored["path"]),
        chunk_index=int(stored["chunk_index"]),
        doc_version=int(stored["doc_version"]),
        content=str(stored["content"]),
    )


def check_chunks(space_id: str, path: str, chunks: Sequence[Chunk], vector_rows: int) -> None:
    """InvalidArgument unless there is one vector per chunk and every chunk is the path's."""
    if vector_rows != len(chunks):
        raise InvalidArgument(f"{len(chunks)} chunks but {vector_rows} vectors", field="vectors")
    for chunk in chunks:
        if chunk.space_id != space_id or chunk.path != path:
            raise InvalidArgument(
                f"chunk {chunk.chunk_id!r} belongs to ({chunk.space_id!r}, {chunk.path!r}), "
                f"not ({space_id!r}, {path!r})",
                field="chunks",
            )
