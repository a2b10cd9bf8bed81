"""IndexerService's results: the index status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram.v1 import indexer_pb2


@dataclass(frozen=True, slots=True)
class IndexStatus:
    active_model: str
    dimension: int
    # A model being filled behind the alias ("" when no switch is under way).
    pending_model: str
    # Events waiting to be indexed.
    backlog: int
    switch_documents_indexed: int
    collections: tuple[str, ...]
    # Rises while the indexer works: sampled twice, its difference is the indexing rate.
    indexed_total: int


def index_status(message: indexer_pb2.GetIndexStatusResponse) -> IndexStatus:
    return IndexStatus(
        active_model=message.active_model,
        dimension=message.dimension,
        pending_model=message.pending_model,
        backlog=message.backlog,
        switch_documents_indexed=message.switch_documents_indexed,
        collections=tuple(message.collections),
        indexed_total=message.indexed_total,
    )
