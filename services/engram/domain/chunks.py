"""Chunks: the unit the keyword and vector indexes hold and search returns."""

from __future__ import annotations

from dataclasses import dataclass


def chunk_id(document_id: str, chunk_index: int) -> str:
    return f"{document_id}:{chunk_index}"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of one document version, with what filters and results need."""

    chunk_id: str
    document_id: str
    space_id: str
    # The space's tenant ("" for global spaces).
    tenant: str
    path: str
    chunk_index: int
    doc_version: int
    content: str


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    """A search hit from one index: the raw score is BM25 or cosine similarity."""

    chunk: Chunk
    score: float


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """An embedding model as the vector index records it: vectors of different models or
    dimensions are never mixed."""

    model_id: str
    dimension: int
