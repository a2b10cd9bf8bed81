"""What the search service needs from its neighbours (the indexes' ports live in
`engram.indexes.ports`, the authorizer in `engram.domain.ports`)."""

from __future__ import annotations

from typing import Protocol

from engram.domain.chunks import ModelInfo
from engram.indexes.ports import Embedder


class QueryEmbedders(Protocol):
    """The embedders this process holds, by the model whose vectors they produce."""

    def for_model(self, model: ModelInfo) -> Embedder | None:
        """The embedder of `model`, or None when this process cannot embed for it."""
        ...
