"""Index positions: read-your-writes between a write and a later search (pure logic).

A write answers with the state it left its document in, `IndexPosition(space_id, path,
document_id, version)`. The indexer records, per index leg and per document id, the highest
version that leg holds (`applied_versions`); a search given positions answers once each
leg it queries has reached them (`behind`).

A document id lives for the life of a path: deleting the path and writing it again makes a
new id whose versions start at 1 again, so versions of two ids are not comparable. What
orders them is the indexer: it indexes the state a path holds *now*, after the events that
named earlier states arrived, so an id an event named that is no longer the path's current
id has ended for good; its row is set to FINISHED, above any real version.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from engram.domain.errors import InvalidArgument

# The recorded version of a document id that has ended (deleted, or followed by another
# document at its path): every position of that id is reached.
FINISHED = 1 << 62
# Positions one search may carry.
MAX_POSITIONS = 256

# (space_id, path, document_id): one progress row.
ProgressKey = tuple[str, str, str]


class IndexLeg(StrEnum):
    """An index a search reads and the indexer records progress for."""

    KEYWORD = "keyword"
    VECTOR = "vector"


def deletion_version(deleted_version: int) -> int:
    """The version a delete's position carries: one past the version it deleted. No live
    state of the id ever holds it, so only the delete itself (its row set to FINISHED)
    reaches it; with the deleted version itself, a leg that had indexed that version but not
    yet the delete would count the delete as reached and still answer the document."""
    return deleted_version + 1


@dataclass(frozen=True, slots=True)
class IndexPosition:
    space_id: str
    path: str
    document_id: str
    version: int

    @property
    def key(self) -> ProgressKey:
        return (self.space_id, self.path, self.document_id)


def merge_positions(
    positions: Sequence[IndexPosition], allowed_space_ids: Collection[str]
) -> list[IndexPosition]:
    """The positions validated and merged: one per document id, the highest version (an
    agent may write one document several times and search once). InvalidArgument names
    the first bad one, or one outside the searched spaces (a position may not probe a
    space the caller did not ask to search)."""
    if len(positions) > MAX_POSITIONS:
        raise InvalidArgument(
            f"at most {MAX_POSITIONS} min_positions per search, got {len(positions)}",
            field="min_positions",
        )
    merged: dict[ProgressKey, IndexPosition] = {}
    for index, position in enumerate(positions):
        field = f"min_positions[{index}]"
        if not (position.space_id and position.path and position.document_id):
            raise InvalidArgument(
                f"{field}: space_id, path and document_id are required (give back the "
                "position a write answered)",
                field=field,
            )
        if position.version < 1:
            raise InvalidArgument(
                f"{field}: version must be at least 1, got {position.version}", field=field
            )
        if position.space_id not in allowed_space_ids:
            raise InvalidArgument(
                f"{field} names a space this search does not cover; add it to spaces",
                field=field,
            )
        known = merged.get(position.key)
        if known is None or position.version > known.version:
            merged[position.key] = position
    return list(merged.values())


def behind(
    positions: Iterable[IndexPosition], reached: Mapping[ProgressKey, int]
) -> list[IndexPosition]:
    """The positions a leg has not reached, given its recorded versions (absent = 0)."""
    return [p for p in positions if reached.get(p.key, 0) < p.version]


def progress_keys(keys: Sequence[ProgressKey], *, field: str = "documents") -> list[ProgressKey]:
    """The progress rows asked about (GetIndexProgress), validated and without repeats:
    at most MAX_POSITIONS, each naming space_id, path and document_id."""
    if len(keys) > MAX_POSITIONS:
        raise InvalidArgument(
            f"at most {MAX_POSITIONS} {field} per call, got {len(keys)}", field=field
        )
    for index, key in enumerate(keys):
        if not all(key):
            raise InvalidArgument(
                f"{field}[{index}]: space_id, path and document_id are required",
                field=f"{field}[{index}]",
            )
    return list(dict.fromkeys(keys))


def applied_versions(current: tuple[str, int] | None, named: Iterable[str]) -> dict[str, int]:
    """The progress rows of one path after a leg applied its current state.

    `current` is the (document_id, version) the leg now holds, None for a deleted path;
    `named` are the document ids of the events this indexing run answers (read before the
    state was). Every named id other than the current one has ended: FINISHED.
    """
    rows = {document_id: FINISHED for document_id in named if document_id}
    if current is not None:
        document_id, version = current
        rows[document_id] = version
    return rows
