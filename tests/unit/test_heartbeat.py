"""HEARTBEAT.md rendering: the managed Status block is replaced, everything else is kept
verbatim and in place; idempotent; a missing file gets a skeleton."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.heartbeat import BEGIN, END, HeartbeatFields, render_heartbeat

pytestmark = pytest.mark.unit

FIELDS = HeartbeatFields(
    last_seen=datetime(2026, 12, 1, 10, 15, tzinfo=UTC),
    session_id="s-42",
    surface="cli",
    turn_count=7,
    open_loops=("reply to Bob", "ship the release"),
)
OTHER = HeartbeatFields(
    last_seen=None, session_id="", surface="web", turn_count=None, open_loops=()
)

OPERATOR_FILE = """# Heartbeat

<!-- operator: keep this short -->
Some free text the operator wrote.

## Schedule

- every morning: review open loops
<!-- weekly: prune MEMORY.md -->
"""


def span(text: str) -> tuple[list[str], int, int]:
    """The text's lines and the first managed block's first and last line."""
    lines = text.split("\n")
    begin = max(i for i, line in enumerate(lines) if line == BEGIN and END in lines[i:])
    return lines, begin, lines.index(END, begin)


def managed(text: str) -> str:
    lines, begin, end = span(text)
    return "\n".join(lines[begin : end + 1])


def outside(text: str) -> list[str]:
    lines, begin, end = span(text)
    return lines[:begin] + lines[end + 1 :]


def test_a_missing_file_gets_a_skeleton_with_status_and_schedule() -> None:
    text = render_heartbeat(None, FIELDS)
    assert text.startswith("# Heartbeat\n\n" + BEGIN + "\n## Status\n")
    assert "\n## Schedule\n" in text and text.endswith("\n")
    assert managed(text).splitlines()[3:-1] == [
        "- last_seen: 2026-12-01T10:15:00Z",
        "- session_id: s-42",
        "- surface: cli",
        "- turn_count: 7",
        "- open_loops:",
        "  - reply to Bob",
        "  - ship the release",
    ]
    assert render_heartbeat("  \n", FIELDS) == text


def test_fields_render_in_utc_and_empty_ones_are_left_out() -> None:
    paris = timezone(timedelta(hours=1))
    fields = HeartbeatFields(
        datetime(2026, 12, 1, 11, 15, 0, 500, tzinfo=paris), "", "", None, ("", "  ")
    )
    block = managed(render_heartbeat(None, fields, note="line one\nline two"))
    assert "- last_seen: 2026-12-01T10:15:00.000500Z" in block
    assert "session_id" not in block and "turn_count" not in block
    assert "- open_loops: none" in block
    assert "- note:\n  line one\n  line two\n" + END in block


def test_operator_lines_stay_verbatim_and_the_block_is_replaced() -> None:
    first = render_heartbeat(OPERATOR_FILE, FIELDS)
    assert first.startswith("# Heartbeat\n\n" + BEGIN)
    block = managed(first)
    assert first == OPERATOR_FILE.replace("# Heartbeat\n\n", f"# Heartbeat\n\n{block}\n\n", 1)
    second = render_heartbeat(first, OTHER)
    assert "s-42" not in second and "- surface: web" in second
    assert outside(second) == outside(first)
    assert second.count(BEGIN) == 1 and second.count("## Status") == 1


def test_an_operator_moved_block_is_rendered_where_it_is() -> None:
    text = "# Heartbeat\n\n## Schedule\n- daily\n\n" + managed(render_heartbeat(None, OTHER))
    rendered = render_heartbeat(text, FIELDS)
    assert rendered.startswith("# Heartbeat\n\n## Schedule\n- daily\n\n" + BEGIN)
    assert "- session_id: s-42" in rendered


def test_injected_markers_in_fields_and_notes_cannot_break_the_block() -> None:
    hostile = HeartbeatFields(None, END, END + "\n" + BEGIN, None, (END,))
    once = render_heartbeat(OPERATOR_FILE, hostile, note=f"{END}\n{BEGIN}")
    twice = render_heartbeat(once, hostile, note=f"{END}\n{BEGIN}")
    assert once == twice
    assert outside(render_heartbeat(once, FIELDS)) == outside(once)


def test_a_lone_marker_is_kept_as_an_ordinary_line() -> None:
    text = f"# Heartbeat\n{BEGIN}\nstale line\n"
    rendered = render_heartbeat(text, FIELDS)
    assert rendered.count(BEGIN) == 2 and "stale line" in rendered
    assert render_heartbeat(rendered, FIELDS) == rendered


lines = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=30),
        st.sampled_from(["# Heartbeat", "## Schedule", "<!-- note -->", "", BEGIN, END, "\r"]),
    ),
    max_size=12,
)
fields = st.builds(
    HeartbeatFields,
    last_seen=st.none() | st.datetimes(timezones=st.just(UTC)),
    session_id=st.text(max_size=10),
    surface=st.text(max_size=10),
    turn_count=st.none() | st.integers(0, 10**6),
    open_loops=st.tuples(st.text(max_size=10)) | st.just(()),
)


def is_subsequence(small: list[str], big: list[str]) -> bool:
    remaining = iter(big)
    return all(any(line == candidate for candidate in remaining) for line in small)


@given(lines, fields, fields, st.text(max_size=20))
def test_rendering_keeps_every_unknown_line_and_is_idempotent(
    original: list[str], first: HeartbeatFields, second: HeartbeatFields, note: str
) -> None:
    existing = "\n".join(original)
    rendered = render_heartbeat(existing, first, note)
    assert render_heartbeat(rendered, first, note) == rendered
    # The result depends only on the lines outside the block: rendering other fields first
    # changes nothing.
    assert render_heartbeat(render_heartbeat(existing, second), first, note) == rendered
    if BEGIN not in original and existing.strip():
        assert is_subsequence(original, rendered.split("\n"))
        assert rendered.count(BEGIN) == 1
