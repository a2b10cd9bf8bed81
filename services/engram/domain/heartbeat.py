"""HEARTBEAT.md: the structured heartbeat fields rendered into one managed block. Pure.

The block runs from the `<!-- engram:status begin ... -->` line to the `<!-- engram:status
end -->` line and holds `## Status` with the fields; a heartbeat write replaces that block
and nothing else, so the operator's `## Schedule` section, comments and every other line stay
verbatim and in place. A document without the block gets it after its `# ` title (or at the
top); a missing or blank document gets a skeleton with a `## Schedule` section.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

BEGIN = "<!-- engram:status begin: engram rewrites this block on every heartbeat write -->"
END = "<!-- engram:status end -->"
_BEGIN_PREFIX = "<!-- engram:status begin"

SKELETON_HEAD = "# Heartbeat"
SKELETON_SCHEDULE = (
    "## Schedule\n"
    "\n"
    "<!-- Periodic checks for the agent, one per line, e.g.\n"
    "- every morning: review open loops and today's notes\n"
    "engram never rewrites this section. -->\n"
)


@dataclass(frozen=True, slots=True)
class HeartbeatFields:
    last_seen: datetime | None
    session_id: str
    surface: str
    turn_count: int | None
    open_loops: tuple[str, ...]


def render_heartbeat(existing: str | None, fields: HeartbeatFields, note: str = "") -> str:
    """HEARTBEAT.md with its managed block rendered from `fields` (and `note`, if any).

    Idempotent, and the result depends only on the lines outside the managed block: every
    one of them is kept verbatim and in order.
    """
    block = _render_block(fields, note)
    if existing is None or not existing.strip():
        return f"{SKELETON_HEAD}\n\n{block}\n\n{SKELETON_SCHEDULE}"
    lines = existing.split("\n")
    span = _managed_span(lines)
    if span is not None:
        start, end = span
        return "\n".join([*lines[:start], block, *lines[end + 1 :]])
    at = _insertion_point(lines)
    before, after = lines[:at], lines[at:]
    gap_before = [""] if before and before[-1].strip() else []
    gap_after = [""] if after and after[0].strip() else []
    return "\n".join([*before, *gap_before, block, *gap_after, *after])


def _render_block(fields: HeartbeatFields, note: str) -> str:
    lines = [BEGIN, "## Status", ""]
    if fields.last_seen is not None:
        lines.append(f"- last_seen: {_rfc3339_utc(fields.last_seen)}")
    if fields.session_id.strip():
        lines.append(f"- session_id: {_one_line(fields.session_id)}")
    if fields.surface.strip():
        lines.append(f"- surface: {_one_line(fields.surface)}")
    if fields.turn_count is not None:
        lines.append(f"- turn_count: {fields.turn_count}")
    loops = [_one_line(loop) for loop in fields.open_loops if loop.strip()]
    if loops:
        lines.append("- open_loops:")
        lines.extend(f"  - {loop}" for loop in loops)
    else:
        lines.append("- open_loops: none")
    note_lines = [line.rstrip() for line in note.strip().splitlines()]
    if note_lines:
        # Indented, so no note line can ever be taken for a marker.
        lines.append("- note:")
        lines.extend(f"  {line}" if line else "" for line in note_lines)
    lines.append(END)
    return "\n".join(lines)


def _rfc3339_utc(at: datetime) -> str:
    # A naive time is taken as UTC (the wire's Timestamp is UTC).
    moment = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    spec = "microseconds" if moment.microsecond else "seconds"
    return moment.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _one_line(value: str) -> str:
    return " ".join(value.split())


def _is_begin(line: str) -> bool:
    line = line.rstrip()
    return line.startswith(_BEGIN_PREFIX) and line.endswith("-->")


def _is_end(line: str) -> bool:
    return line.rstrip() == END


def _managed_span(lines: list[str]) -> tuple[int, int] | None:
    """The first begin..end pair with no other marker inside; a lone marker is a plain line."""
    begin: int | None = None
    for index, line in enumerate(lines):
        if _is_begin(line):
            begin = index
        elif _is_end(line) and begin is not None:
            return begin, index
    return None


def _insertion_point(lines: list[str]) -> int:
    """After the title (`# ...`) when the document opens with one, else the top."""
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        return index + 1 if line.startswith("# ") else 0
    return 0
