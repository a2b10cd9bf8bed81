"""What the search service needs from its neighbours (the indexes' ports live in
`engram.indexer.ports`)."""

from __future__ import annotations

from typing import Protocol

from engram.domain.chunks import ModelInfo
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.indexer.ports import Embedder
from engram.storage.ports import AuthorizedSpace


class Authorizer(Protocol):
    """Decides who may search which space, stamping tenant and user from the identity."""

    async def authorize(
        self, principal: Principal, action: Action, space: SpaceRef
    ) -> AuthorizedSpace: ...


class QueryEmbedders(Protocol):
    """The embedders this process holds, by the model whose vectors they produce."""

    def for_model(self, model: ModelInfo) -> Embedder | None:
        """The embedder of `model`, or None when this process cannot embed for it."""
        ...
