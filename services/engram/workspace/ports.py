"""What the workspace service needs from storage, search and its own stores.

Every call takes the caller and the space already authorized (stamped) by the workspace
service: the in-process adapters pass the caller on, the gRPC adapters act as the workspace's
service principal for the stamped space.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from engram.domain.positions import IndexPosition
from engram.domain.principals import Principal
from engram.domain.spaces import SpaceRef


@dataclass(frozen=True, slots=True)
class WorkspaceDocument:
    path: str
    content: str
    sha256: str
    size_bytes: int
    version: int
    word_count: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """The document after a write (content not returned)."""

    path: str
    sha256: str
    size_bytes: int
    version: int
    created: bool
    # The index position the write left the document in (read-your-writes searches).
    position: IndexPosition | None = None
    # New size minus old size: the bytes an append added.
    bytes_delta: int = 0


@dataclass(frozen=True, slots=True)
class MemoryHit:
    path: str
    content: str
    score: float
    document_id: str
    chunk_id: str
    is_hybrid_match: bool
    # Calibrated probability that the hit is relevant (SearchResult.relevance).
    relevance: float = 0.0


@dataclass(frozen=True, slots=True)
class MemoryHits:
    hits: list[MemoryHit]
    degraded: bool = False
    degraded_reasons: list[str] = field(default_factory=list)
    keyword_positions_behind: int = 0
    vector_positions_behind: int = 0
    waited_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class PositionWait:
    """Search only once the indexes hold these writes (SearchQuery's fields of that name)."""

    positions: Sequence[IndexPosition] = ()
    max_wait_seconds: float | None = None
    deadline_seconds: float | None = None


NO_WAIT = PositionWait()


class WorkspaceDocuments(Protocol):
    """The space's documents (StorageService)."""

    async def get(
        self, principal: Principal, space: SpaceRef, path: str
    ) -> WorkspaceDocument | None: ...

    async def write(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        content: str,
        *,
        append: bool,
        expected_sha256: str = "",
        create_only: bool = False,
        as_line: bool = False,
        created_prefix: str = "",
    ) -> StoredWrite:
        """Raises EtagMismatch when `expected_sha256` or `create_only` does not hold. An
        append `as_line` starts on a line of its own; `created_prefix` goes before it when
        the append creates the document (both decided by storage, atomically)."""
        ...

    async def delete(
        self, principal: Principal, space: SpaceRef, path: str, *, expected_sha256: str
    ) -> None: ...

    async def list_paths(
        self, principal: Principal, space: SpaceRef, directory: str, *, limit: int
    ) -> list[str]:
        """Every document path under `directory` ("" = all), in byte order, at most `limit`
        (one more tells the caller there are more)."""
        ...


class WorkspaceSearch(Protocol):
    """Hybrid search of one space (SearchService)."""

    async def search(
        self,
        principal: Principal,
        space: SpaceRef,
        query: str,
        *,
        limit: int,
        wait: PositionWait = NO_WAIT,
        min_relevance: float = 0.0,
    ) -> MemoryHits: ...


class WriteGate(Protocol):
    """Counts one workspace write of an agent (principal + space); raises RateLimited."""

    async def check(self, principal: Principal, space_id: str) -> None: ...


# One page of a listing: (document paths, next page token or "").
PathPage = tuple[list[str], str]


async def collect_paths(page: Callable[[str], Awaitable[PathPage]], limit: int) -> list[str]:
    """Pages through a listing (`page(token)`) until it ends or holds `limit` paths."""
    paths: list[str] = []
    token = ""
    while len(paths) < limit:
        found, token = await page(token)
        paths.extend(found)
        if not token:
            break
    return paths[:limit]
