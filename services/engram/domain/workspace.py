"""Workspace rules (ARCHITECTURE §5): where each memory tool writes, how entries look, what an
agent may not touch, and the bounds of every knob. Pure: no I/O, no clock.

One agent workspace is one space. `memory_write` targets MEMORY.md, today's daily log
(`daily/YYYY-MM-DD.md`, or `daily/YYYY-MM-DD-<session>.md` for one surface's journal, in the
caller's IANA time zone), HEARTBEAT.md, or a canonical custom `.md` path. The identity files
are never writable through the workspace tools: a prompt-injection defence.

Journals written elsewhere are recognised too: OpenClaw/Minara keep them as
`memory/YYYY-MM-DD[-session].md`, and those count as daily logs of their day beside `daily/`
(in the prompt, dreaming and log retention), so imported logs are not left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engram.domain.errors import InvalidArgument, PermissionDenied, ProtectedFile, quoted
from engram.domain.paths import validate_document_path
from engram.domain.principals import Principal

MEMORY_PATH = "MEMORY.md"
HEARTBEAT_PATH = "HEARTBEAT.md"
BOOTSTRAP_PATH = "BOOTSTRAP.md"
DAILY_DIR = "daily"
PROTECTED_FILES = ("IDENTITY.md", "SOUL.md", "AGENTS.md", "USER.md")
_PROTECTED_FOLDED = {name.casefold(): name for name in PROTECTED_FILES}

DEFAULT_DEPTH = 1
MAX_DEPTH = 10
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_SESSION_CHARS = 64
MAX_QUERY_CHARS = 4096
MAX_TIME_ZONE_CHARS = 64

_SESSION = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
# Where daily logs live: engram's own `daily/`, and the OpenClaw/Minara `memory/` layout.
JOURNAL_DIRS = ("daily", "memory")
_DAILY_LOG = re.compile(r"(?:daily|memory)/(\d{4}-\d{2}-\d{2})(?:-([A-Za-z0-9_-]{1,64}))?\.md")
# A zone key: the IANA database's names only (no path tricks: ZoneInfo reads files).
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")


class Target(StrEnum):
    MEMORY = "memory"
    DAILY_LOG = "daily_log"
    HEARTBEAT = "heartbeat"
    PATH = "path"


# --- validation -----------------------------------------------------------------------------


def require_content(content: str, *, field: str = "content") -> str:
    """Content is required and must not be blank."""
    if not content.strip():
        raise InvalidArgument(f"{field} is required and must not be empty", field=field)
    return content


def tree_depth(depth: int) -> int:
    """0 (unset) = 1, the immediate children; otherwise 1..10."""
    if depth == 0:
        return DEFAULT_DEPTH
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidArgument(
            f"depth must be between 1 and {MAX_DEPTH} (0 = {DEFAULT_DEPTH}); got {depth}",
            field="depth",
        )
    return depth


def search_limit(limit: int) -> int:
    """0 (unset) = 5; otherwise 1..20."""
    if limit == 0:
        return DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(
            f"limit must be between 1 and {MAX_LIMIT} (0 = {DEFAULT_LIMIT}); got {limit}",
            field="limit",
        )
    return limit


# memory_search's default floor on relevance (bench/RESULTS.md, issue 32: it empties most
# searches for things never stored and costs almost no found answer).
DEFAULT_MIN_RELEVANCE = 0.025


def min_relevance(value: float) -> float:
    """A memory_search floor on relevance: 0..1 (0 keeps every hit)."""
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidArgument(
            f"min_relevance must be between 0 and 1, got {value!r}", field="min_relevance"
        )
    return value


def search_query(query: str) -> str:
    if not query.strip():
        raise InvalidArgument("query is required and must not be empty", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(
            f"query is {len(query)} characters; at most {MAX_QUERY_CHARS} are allowed",
            field="query",
        )
    return query


def time_zone(name: str) -> tzinfo:
    """The IANA zone `name` ("" = UTC); INVALID_ARGUMENT naming an unknown one."""
    if not name:
        return ZoneInfo("UTC")
    if len(name) > MAX_TIME_ZONE_CHARS or not _ZONE_KEY.fullmatch(name):
        raise InvalidArgument(
            f"time_zone {quoted(name)} is not an IANA time zone name (e.g. Europe/Berlin)",
            field="time_zone",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"unknown time_zone {quoted(name)}: use an IANA name such as Europe/Berlin or UTC",
            field="time_zone",
        ) from None


def session_name(session: str) -> str:
    """The session: empty, or 1..64 characters of [A-Za-z0-9_-]."""
    if session and not _SESSION.fullmatch(session):
        raise InvalidArgument(
            f"session {quoted(session)} must be 1..{MAX_SESSION_CHARS} characters of "
            "A-Z, a-z, 0-9, _ and -",
            field="session",
        )
    return session


def check_writable(path: str) -> str:
    """Refuses the identity files (also spelled in another case) at the workspace root."""
    protected = _PROTECTED_FOLDED.get(path.casefold())
    if protected is not None:
        raise ProtectedFile(
            f"{protected} is an identity file the workspace tools cannot write; an operator "
            "changes it through StorageService",
            path=protected,
        )
    return path


def memory_append_only() -> PermissionDenied:
    """The refusal of an agent's replace of MEMORY.md (append-only by the space's policy)."""
    return PermissionDenied(
        f"{MEMORY_PATH} is append-only for the workspace tools: append to it (append=true); "
        "an operator rewrites it through StorageService, dreaming adds to it "
        "(ENGRAM_WORKSPACE_MEMORY_APPEND_ONLY)",
        rule="memory_append_only",
    )


# --- targets ---------------------------------------------------------------------------------


def local_now(now: datetime, zone: tzinfo) -> datetime:
    """`now` (aware) in `zone`."""
    return now.astimezone(zone)


def log_day(spec: str, today: date) -> date:
    """The day `spec` names for read-by-date: "today", "yesterday" or YYYY-MM-DD."""
    if spec == "today":
        return today
    if spec == "yesterday":
        return today - timedelta(days=1)
    try:
        if not _ISO_DAY.fullmatch(spec):
            raise ValueError(spec)
        return date.fromisoformat(spec)
    except ValueError:
        raise InvalidArgument(
            f"date {quoted(spec)} must be today, yesterday or a date as YYYY-MM-DD",
            field="date",
        ) from None


def log_paths_of(day: date, session: str = "") -> list[str]:
    """Where `day`'s log (or `session`'s journal) may live: daily/, then memory/."""
    suffix = f"-{session}" if session else ""
    return [f"{directory}/{day.isoformat()}{suffix}.md" for directory in JOURNAL_DIRS]


def daily_log_path(day: date, session: str = "") -> str:
    """`daily/YYYY-MM-DD.md`, or `daily/YYYY-MM-DD-<session>.md`."""
    suffix = f"-{session}" if session else ""
    return f"{DAILY_DIR}/{day.isoformat()}{suffix}.md"


def parse_daily_log_path(path: str) -> tuple[date, str] | None:
    """(date, session or "") of a daily log path (`daily/` or `memory/`, with or without a
    session); None for any other path."""
    match = _DAILY_LOG.fullmatch(path)
    if match is None:
        return None
    try:
        day = date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return day, match.group(2) or ""


def target_path(target: Target, path: str, *, today: date, session: str = "") -> str:
    """The document a write to `target` lands in; custom paths must be canonical Markdown
    paths and never an identity file."""
    if target is Target.MEMORY:
        resolved = MEMORY_PATH
    elif target is Target.HEARTBEAT:
        resolved = HEARTBEAT_PATH
    elif target is Target.DAILY_LOG:
        resolved = daily_log_path(today, session_name(session))
    else:
        resolved = validate_document_path(path)
    return check_writable(resolved)


def agent_key(principal: Principal, space_id: str) -> str:
    """One agent: a principal in a space (its rate limits, its SOUL.md baseline)."""
    return f"{principal.tenant}/{principal.subject}/{space_id}"


# --- entries ---------------------------------------------------------------------------------


def daily_log_header(day: date) -> str:
    """The first lines of a new daily log."""
    return f"# Daily Log - {day.isoformat()}\n\n"


def daily_log_entry(at: datetime, content: str) -> str:
    """`[HH:MM:SS] <content>`, `at` already in the caller's zone."""
    return f"[{at.strftime('%H:%M:%S')}] {content}"


def line(content: str) -> str:
    """`content` ending in exactly the newline it needs to end a line."""
    return content if content.endswith("\n") else content + "\n"


def archived_bootstrap_path(updated_at: datetime) -> str:
    """`BOOTSTRAP.done-20261201T101500Z.md`: named after BOOTSTRAP.md's last change, so a
    retried completion arrives at the same name."""
    return f"BOOTSTRAP.done-{updated_at.strftime('%Y%m%dT%H%M%SZ')}.md"


# --- tree ------------------------------------------------------------------------------------


@dataclass
class TreeNode:
    """A file, or a directory (name and path ending in "/") with its children."""

    name: str
    path: str
    children: list[TreeNode] = field(default_factory=list)

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


def build_tree(root: str, paths: Iterable[str], depth: int) -> list[TreeNode]:
    """The nested tree of the document `paths` under `root` ("" = the workspace root) to
    `depth` levels: directories first-seen order within byte-sorted paths, each directory
    once, listed (without children) at the last level."""
    prefix = f"{root}/" if root else ""
    top: list[TreeNode] = []
    directories: dict[str, TreeNode] = {}
    for path in paths:
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        siblings = top
        for level, part in enumerate(parts[:depth]):
            is_file = level == len(parts) - 1
            if is_file:
                siblings.append(TreeNode(part, prefix + "/".join(parts[: level + 1])))
                break
            node_path = prefix + "/".join(parts[: level + 1]) + "/"
            node = directories.get(node_path)
            if node is None:
                node = TreeNode(part + "/", node_path)
                directories[node_path] = node
                siblings.append(node)
            siblings = node.children
    return top
