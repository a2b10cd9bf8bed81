"""The hygiene jobs' rules: which daily logs retire, staleness, duplicates, and when the
indexes disagree with the store."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from engram.domain.chunks import MIXED_VERSIONS, IndexedDocument, indexed_documents
from engram.domain.hygiene import (
    StoredState,
    archive_completes,
    archived_log_path,
    content_key,
    counts_for_staleness,
    daily_logs,
    duplicate_groups,
    logs_to_retire,
    reindex_reason,
    stale_cutoff,
)
from engram.maintenance.hygiene.common import Details

pytestmark = pytest.mark.unit

TODAY = date(2026, 3, 10)


def logs(*days: int, session: str = "") -> list[str]:
    suffix = f"-{session}" if session else ""
    return [f"daily/{(TODAY - timedelta(days=d)).isoformat()}{suffix}.md" for d in days]


def retired(paths: list[str], *, keep: int = 60, days: int = 0) -> list[str]:
    found = logs_to_retire(daily_logs(paths), TODAY, max_daily_logs=keep, retention_days=days)
    return [log.path for log in found]


def test_only_daily_logs_are_considered() -> None:
    found = daily_logs(
        ["MEMORY.md", "daily/2026-03-01.md", "daily/notes.md", "daily/2026-13-01.md"]
    )
    assert [log.path for log in found] == ["daily/2026-03-01.md"]


def test_logs_beyond_the_newest_n_retire_oldest_first() -> None:
    paths = logs(2, 3, 4, 5, 6)
    assert retired(paths, keep=3) == logs(6, 5)
    assert retired(paths, keep=5) == []
    assert retired(paths, keep=0) == [], "0 = the default of 60"


def test_logs_older_than_the_age_limit_retire() -> None:
    paths = logs(2, 10, 31, 40)
    assert retired(paths, days=30) == logs(40, 31)
    assert retired(paths, days=0) == [], "0 = no age limit"


def test_session_logs_count_as_logs_of_their_day() -> None:
    paths = logs(5) + logs(5, session="cli") + logs(9)
    assert retired(paths, keep=2) == logs(9)


def test_todays_and_yesterdays_logs_never_retire() -> None:
    paths = logs(0, 1, 2)
    assert retired(paths, keep=1) == logs(2)
    assert retired(logs(-1, 0, 1), keep=1, days=1) == [], "a zone ahead of UTC may write them"


def test_archive_paths_and_completing_an_archive() -> None:
    assert archived_log_path("daily/2026-03-01.md") == "archive/daily/2026-03-01.md"
    assert archive_completes("a\n", "a\nb\n"), "the log grew after the copy"
    assert archive_completes("a\n", "a\n")
    assert not archive_completes("other\n", "a\nb\n")


def test_dated_records_never_count_as_stale() -> None:
    assert counts_for_staleness("notes/plan.md")
    assert counts_for_staleness("MEMORY.md")
    assert not counts_for_staleness("daily/2026-01-01.md")
    assert not counts_for_staleness("archive/daily/2026-01-01.md")


def test_stale_cutoff_uses_the_default_for_zero() -> None:
    now = datetime(2026, 3, 10, tzinfo=UTC)
    assert stale_cutoff(now, 10) == now - timedelta(days=10)
    assert stale_cutoff(now, 0) == now - timedelta(days=90)


def test_duplicates_ignore_whitespace_but_not_case() -> None:
    assert content_key("a  b\n\nc\n") == content_key(" a b c")
    assert content_key("Cafe\u0301") == content_key("Caf\u00e9"), "Unicode NFC"
    assert content_key("A b") != content_key("a b")
    assert content_key("  \n") is None and content_key("") is None
    keys = {
        "b.md": content_key("same text"),
        "a.md": content_key("same\ntext"),
        "c.md": content_key("other"),
        "d.md": None,
        "e.md": None,
        "z.md": content_key("other "),
    }
    assert duplicate_groups(keys) == [["a.md", "b.md"], ["c.md", "z.md"]]


def test_indexed_documents_flags_a_path_of_mixed_versions() -> None:
    found = indexed_documents(
        [("a.md", "d", 2), ("a.md", "d", 2), ("b.md", "e", 1), ("b.md", "e", 2)]
    )
    assert found["a.md"] == IndexedDocument("d", 2, 2)
    assert found["b.md"] == IndexedDocument("e", MIXED_VERSIONS, 2)


STORED = StoredState("doc", 3, indexable=True)
HELD = IndexedDocument("doc", 3, 4)


@pytest.mark.parametrize(
    ("stored", "keyword", "vector", "reason"),
    [
        (STORED, HELD, HELD, None),
        (STORED, None, HELD, "missing from the keyword index"),
        (STORED, HELD, None, "missing from the vector index"),
        (
            STORED,
            IndexedDocument("doc", 2, 4),
            HELD,
            "the keyword index holds version 2, the store 3",
        ),
        (STORED, HELD, IndexedDocument("old", 3, 4), "another document"),
        (STORED, HELD, IndexedDocument("doc", MIXED_VERSIONS, 4), "several versions"),
        (STORED, HELD, IndexedDocument("doc", 3, 2), "4 chunks but 2 vectors"),
        (None, HELD, None, "not in the store"),
        (None, None, None, None),
        (StoredState("doc", 1, indexable=False), None, None, None),
        (StoredState("doc", 1, indexable=False), HELD, None, "blank"),
    ],
)
def test_reindex_reasons(
    stored: StoredState | None,
    keyword: IndexedDocument | None,
    vector: IndexedDocument | None,
    reason: str | None,
) -> None:
    found = reindex_reason(stored, keyword, vector, vectors_expected=True)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


def test_without_an_active_model_only_the_keyword_index_counts() -> None:
    assert reindex_reason(STORED, HELD, None, vectors_expected=False) is None
    assert reindex_reason(STORED, None, None, vectors_expected=False) is not None


def test_run_details_are_bounded_and_say_how_many_were_left_out() -> None:
    few = Details(limit=3)
    for n in range(3):
        few.add(f"line {n}")
    assert few.lines() == ("line 0", "line 1", "line 2")
    many = Details(limit=3)
    for n in range(10):
        many.add(f"line {n}")
    assert many.lines() == ("line 0", "line 1", "... and 8 more")
