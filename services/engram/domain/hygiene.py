"""The rules of the hygiene jobs, as pure functions: which daily logs retire, what counts
as stale, what counts as a duplicate, and which documents the indexes are missing."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from engram.domain.chunks import MIXED_VERSIONS, IndexedDocument
from engram.domain.maintenance import DEFAULT_MAX_DAILY_LOGS, DEFAULT_STALE_AFTER_DAYS
from engram.domain.workspace import DAILY_DIR, parse_daily_log_path

ARCHIVE_DIR = "archive"
ARCHIVED_LOGS_DIR = f"{ARCHIVE_DIR}/{DAILY_DIR}"
# A log dated this many days before today (UTC) or later is never retired: an agent whose
# time zone is ahead of UTC may still be appending to it.
OPEN_LOG_DAYS = 1

_WHITESPACE = re.compile(r"\s+")


# --- daily-log retention -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DailyLog:
    path: str
    day: date


def daily_logs(paths: Iterable[str]) -> list[DailyLog]:
    """The daily logs (`daily/` or `memory/YYYY-MM-DD[-session].md`) among `paths`."""
    found = []
    for path in paths:
        parsed = parse_daily_log_path(path)
        if parsed is not None:
            found.append(DailyLog(path, parsed[0]))
    return found


def logs_to_retire(
    logs: Sequence[DailyLog], today: date, *, max_daily_logs: int, retention_days: int
) -> list[DailyLog]:
    """The logs past the retention, oldest first: all but the newest `max_daily_logs`
    (0 or less = the default), and those dated more than `retention_days` days before
    `today` (0 = no age limit). Logs of the last OPEN_LOG_DAYS days always stay."""
    keep = max_daily_logs if max_daily_logs > 0 else DEFAULT_MAX_DAILY_LOGS
    newest_first = sorted(logs, key=lambda log: (log.day, log.path), reverse=True)
    open_from = today - timedelta(days=OPEN_LOG_DAYS)
    age_limit = today - timedelta(days=retention_days) if retention_days > 0 else None
    retired = [
        log
        for rank, log in enumerate(newest_first)
        if log.day < open_from and (rank >= keep or (age_limit is not None and log.day < age_limit))
    ]
    return retired[::-1]


def archived_log_path(path: str) -> str:
    """Where an archived daily log lives: `daily/2026-01-02.md` -> `archive/daily/2026-01-02.md`."""
    return f"{ARCHIVE_DIR}/{path}"


def archive_completes(archived: str, log: str) -> bool:
    """Whether an existing archive copy may be replaced by the log's content: the copy is a
    prefix of the log (a run copied it, then the log grew by appends before the delete).
    Anything else in the archive is not ours to overwrite."""
    return log.startswith(archived)


# --- staleness --------------------------------------------------------------------------------


def counts_for_staleness(path: str) -> bool:
    """Daily logs and archived documents are dated records, not knowledge that goes out of
    date: log retention handles them, and they never count as stale."""
    return not path.startswith((f"{ARCHIVE_DIR}/", f"{DAILY_DIR}/")) and (
        parse_daily_log_path(path) is None
    )


def stale_cutoff(now: datetime, stale_after_days: int) -> datetime:
    """Documents last updated before this are stale (0 or less = the default age)."""
    days = stale_after_days if stale_after_days > 0 else DEFAULT_STALE_AFTER_DAYS
    return now - timedelta(days=days)


def stale_line(path: str, updated_at: datetime, now: datetime) -> str:
    """A staleness report's detail line: `notes/old.md (last updated 2026-01-02, 120 days)`."""
    age = (now - updated_at).days
    return f"{path} (last updated {updated_at.date().isoformat()}, {age} days ago)"


# --- duplicates -------------------------------------------------------------------------------


def normalised_content(content: str) -> str:
    """The text two documents must share to count as duplicates: Unicode NFC, every run
    of whitespace (line breaks included) as one space, no leading or trailing whitespace.
    Case and punctuation count."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", content)).strip()


def content_key(content: str) -> str | None:
    """The duplicate-detection key of a document (None for blank ones: empty files are not
    duplicates of each other in any useful sense)."""
    normal = normalised_content(content)
    if not normal:
        return None
    return hashlib.sha256(normal.encode()).hexdigest()


def duplicate_groups(keys: Mapping[str, str | None]) -> list[list[str]]:
    """Paths sharing a content key, each group sorted, groups ordered by their first path."""
    by_key: dict[str, list[str]] = {}
    for path, key in keys.items():
        if key is not None:
            by_key.setdefault(key, []).append(path)
    groups = [sorted(paths) for paths in by_key.values() if len(paths) > 1]
    return sorted(groups)


def duplicate_line(group: Sequence[str]) -> str:
    return " = ".join(group)


# --- embedding backfill -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredState:
    """What the store holds at a path: the identity the indexes must carry, and whether
    the document has any text to index (blank documents have no chunks)."""

    document_id: str
    version: int
    indexable: bool


def reindex_reason(
    stored: StoredState | None,
    keyword: IndexedDocument | None,
    vector: IndexedDocument | None,
    *,
    vectors_expected: bool,
) -> str | None:
    """Why a path's index entries disagree with the store (None when they agree): a
    document missing from an index or held there at another version, chunks without a
    vector in the active model, or chunks of a document the store no longer has."""
    if stored is None or not stored.indexable:
        if keyword is None and vector is None:
            return None
        return "indexed, but not in the store" if stored is None else "indexed, but blank"
    keyword_problem = _disagreement(keyword, stored, "keyword index")
    if keyword_problem:
        return keyword_problem
    if not vectors_expected:
        return None
    vector_problem = _disagreement(vector, stored, "vector index")
    if vector_problem:
        return vector_problem
    assert keyword is not None and vector is not None
    if keyword.chunk_count != vector.chunk_count:
        return f"{keyword.chunk_count} chunks but {vector.chunk_count} vectors"
    return None


def _disagreement(indexed: IndexedDocument | None, stored: StoredState, index: str) -> str:
    if indexed is None or indexed.chunk_count == 0:
        return f"missing from the {index}"
    if indexed.document_id != stored.document_id:
        return f"the {index} holds another document that lived at this path"
    if indexed.doc_version == MIXED_VERSIONS:
        return f"the {index} holds chunks of several versions"
    if indexed.doc_version != stored.version:
        return f"the {index} holds version {indexed.doc_version}, the store {stored.version}"
    return ""
