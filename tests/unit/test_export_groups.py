"""An export reads a space's documents in byte-bounded groups (issue 29: an export of large
documents used to hold 200 of them, up to 400 MiB, at once)."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.domain.documents import PathEntry, byte_groups

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def sizes(*groups: list[PathEntry]) -> list[list[int]]:
    return [[entry.size_bytes for entry in group] for group in groups]


def entries(*sizes: int) -> list[PathEntry]:
    return [PathEntry(f"d{i}.md", size, WHEN) for i, size in enumerate(sizes)]


def test_groups_stay_within_the_budget_and_keep_the_order() -> None:
    listed = entries(3, 4, 2, 5, 1, 1)
    groups = list(byte_groups(listed, 6))
    assert sizes(*groups) == [[3], [4, 2], [5, 1], [1]]
    assert [entry for group in groups for entry in group] == listed


def test_a_document_larger_than_the_budget_is_a_group_of_its_own() -> None:
    assert sizes(*byte_groups(entries(1, 9, 1), 4)) == [[1], [9], [1]]


def test_nothing_listed_gives_no_group() -> None:
    assert list(byte_groups([], 4)) == []
