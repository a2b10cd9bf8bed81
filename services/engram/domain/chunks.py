"""Chunks: the unit the keyword and vector indexes hold and search returns."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # The Markdown headings the chunk sits under (see `headings`): indexed with the chunk,
    # not returned by search, and derived from the document, so not part of its identity.
    heading: str = field(default="", compare=False)

    @property
    def indexed_text(self) -> str:
        """What the indexes match and embed: the heading trail, then the chunk's text."""
        return f"{self.heading}\n\n{self.content}" if self.heading else self.content


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
