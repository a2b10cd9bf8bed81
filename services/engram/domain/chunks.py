"""Chunks: the unit the keyword and vector indexes hold and search returns."""

from __future__ import annotations

from collections.abc import Iterable
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
class IndexedDocument:
    """What an index holds for one path: which document version its chunks came from, and
    how many chunks it holds (the embedding backfill compares this with the store)."""

    document_id: str
    doc_version: int
    chunk_count: int


# The doc_version an IndexedDocument reports when a path's chunks come from several
# document versions (a replace cut short): it never equals a stored version.
MIXED_VERSIONS = -1


def indexed_documents(entries: Iterable[tuple[str, str, int]]) -> dict[str, IndexedDocument]:
    """(path, document_id, doc_version) of each chunk an index holds for a space, summed
    up per path."""
    found: dict[str, IndexedDocument] = {}
    for path, document_id, doc_version in entries:
        seen = found.get(path)
        if seen is None:
            found[path] = IndexedDocument(document_id, doc_version, 1)
            continue
        same = (seen.document_id, seen.doc_version) == (document_id, doc_version)
        found[path] = IndexedDocument(
            seen.document_id, seen.doc_version if same else MIXED_VERSIONS, seen.chunk_count + 1
        )
    return found


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """An embedding model as the vector index records it: vectors of different models or
    dimensions are never mixed."""

    model_id: str
    dimension: int
