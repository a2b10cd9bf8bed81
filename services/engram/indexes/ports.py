"""Ports of the indexing and search path: embedders, the embedding cache, the two indexes.

Both indexes key a document's chunks by (space_id, path) - the store's own key - so
replacing a path's chunks also removes chunks of an earlier document that lived there.
Every search filters by space inside the backend; nothing is filtered after retrieval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, ScoredChunk
from engram.domain.errors import InvalidArgument, Unavailable

Vectors = npt.NDArray[np.float32]


class IndexModelMismatch(InvalidArgument):
    """A vector of another model or dimension was offered to a collection."""

    reason = "INDEX_MODEL_MISMATCH"


class IndexUnavailable(Unavailable):
    """An index backend failed or timed out (search degrades on this; a caller sees
    UNAVAILABLE and may retry)."""

    reason = "INDEX_UNAVAILABLE"


class Embedder(Protocol):
    @property
    def model(self) -> ModelInfo: ...

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """(len(texts), dimension) float32, each row L2-normalised. Runs off the event loop."""
        ...

    async def embed_query(self, text: str) -> Vectors:
        """(dimension,) float32, L2-normalised."""
        ...


class EmbeddingCache(Protocol):
    """Vectors keyed by (model id, sha256 of the chunk text)."""

    async def get_many(self, model_id: str, text_hashes: Sequence[str]) -> dict[str, Vectors]: ...

    async def put_many(self, model_id: str, vectors: Mapping[str, Vectors]) -> None: ...


class KeywordIndex(Protocol):
    async def open(self) -> None:
        """Creates indexes/templates/aliases idempotently."""
        ...

    async def close(self) -> None: ...

    async def replace_chunks(self, space_id: str, path: str, chunks: Sequence[Chunk]) -> None:
        """Makes the chunks stored for (space_id, path) exactly `chunks`, visible to search
        when this returns."""
        ...

    async def delete_chunks(self, space_id: str, path: str) -> None: ...

    async def delete_space(self, space_id: str) -> None:
        """Removes every chunk of the space (DeleteSpace), gone from search on return."""
        ...

    async def search(
        self, space_ids: Sequence[str], query: str, *, limit: int, path_prefix: str = ""
    ) -> list[ScoredChunk]:
        """BM25 hits, best first, only from `space_ids` (and under `path_prefix`)."""
        ...

    async def chunks_of(self, space_id: str, path: str) -> list[Chunk]:
        """Every chunk stored for (space_id, path), by chunk_index."""
        ...

    async def indexed_documents(self, space_id: str) -> dict[str, IndexedDocument]:
        """Per path of the space: the document version its chunks came from and how many
        there are (the embedding backfill compares this with the store)."""
        ...


class VectorIndex(Protocol):
    """One collection per embedding model; an alias names the active one search uses."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ensure_collection(self, model: ModelInfo) -> None:
        """Creates the model's collection if missing (idempotent); refuses a known model id
        with another dimension."""
        ...

    async def active_model(self) -> ModelInfo | None:
        """The collection the alias points to (None before the first one is activated)."""
        ...

    async def activate(self, model_id: str) -> None:
        """Points the alias at the model's collection, atomically."""
        ...

    async def collections(self) -> list[ModelInfo]: ...

    async def drop_collection(self, model_id: str) -> None: ...

    async def replace_chunks(
        self, model_id: str, space_id: str, path: str, chunks: Sequence[Chunk], vectors: Vectors
    ) -> None:
        """Makes the model collection's chunks for (space_id, path) exactly `chunks`, with
        `vectors[i]` for `chunks[i]`; IndexModelMismatch for a wrong model or dimension."""
        ...

    async def delete_chunks(self, space_id: str, path: str) -> None:
        """Removes the path's chunks from every collection."""
        ...

    async def delete_space(self, space_id: str) -> None:
        """Removes every chunk of the space from every collection (DeleteSpace)."""
        ...

    async def search(
        self,
        space_ids: Sequence[str],
        vector: Vectors,
        *,
        limit: int,
        path_prefix: str = "",
        model_id: str | None = None,
    ) -> list[ScoredChunk]:
        """Cosine hits, best first, from the active collection (or `model_id`'s), only from
        `space_ids`; IndexModelMismatch if the vector's dimension is not the collection's."""
        ...

    async def chunks_of(
        self, space_id: str, path: str, *, model_id: str | None = None
    ) -> list[Chunk]: ...

    async def indexed_documents(
        self, space_id: str, *, model_id: str | None = None
    ) -> dict[str, IndexedDocument]:
        """Per path of the space, in the active collection (or `model_id`'s): the document
        version its vectors came from and how many there are; {} with no active model."""
        ...
