"""Heading trails: which Markdown headings a chunk is indexed under."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.domain.chunking import build_chunks
from engram.domain.headings import MAX_HEADING_CHARS, MAX_TRAIL_CHARS, heading_trails

pytestmark = pytest.mark.unit


def _chunks(text: str) -> list[tuple[str, str]]:
    built = build_chunks(
        space_id="s", tenant="t", path="p.md", document_id="d", version=1, content=text
    )
    return [(c.heading, c.content) for c in built]


def test_nested_headings_form_a_trail_and_a_sibling_replaces_its_level() -> None:
    text = "# Project\nintro\n## Billing\nbills\n### Invoices\ninv\n## Hiring\nhire\n"
    at = {line: text.index(line) for line in ("intro", "bills", "inv", "hire")}
    trails = heading_trails(text, [0, at["intro"], at["bills"], at["inv"], at["hire"]])
    assert trails == [
        "",
        "# Project",
        "# Project\n## Billing",
        "# Project\n## Billing\n### Invoices",
        "# Project\n## Hiring",
    ]


def test_a_heading_at_the_chunk_start_is_in_its_text_not_its_trail() -> None:
    text = "# Title\nbody"
    assert heading_trails(text, [0, 1]) == ["", "# Title"]


@pytest.mark.parametrize(
    "line",
    ["#hashtag", "####### seven", "    # indented code", "#", "##   ", "\\# escaped"],
)
def test_lines_that_are_not_headings(line: str) -> None:
    text = f"{line}\nbody"
    assert heading_trails(text, [len(text) - 1]) == [""]


def test_closing_hashes_go_but_a_hash_in_a_word_stays() -> None:
    text = "## Tips ##\n### C#\nbody"
    assert heading_trails(text, [len(text) - 1]) == ["## Tips\n### C#"]


def test_headings_inside_fenced_code_do_not_count() -> None:
    text = "# Real\n```sh\n# a shell comment\n~~~\n```\n~~~\n# also code\n~~~\nbody"
    assert heading_trails(text, [len(text) - 1]) == ["# Real"]


def test_long_headings_and_deep_trails_are_bounded() -> None:
    text = "".join(f"{'#' * level} {'x' * 500}\n" for level in range(1, 7)) + "body"
    (trail,) = heading_trails(text, [len(text) - 1])
    assert len(trail) <= MAX_TRAIL_CHARS
    assert trail.endswith("###### " + "x" * MAX_HEADING_CHARS)


def test_chunks_of_a_long_section_keep_its_heading_and_return_their_own_text() -> None:
    body = " ".join(f"The invoice run {i} was late." for i in range(80))
    text = f"# Finance\n\n## Billing\n\n{body}\n"
    chunks = _chunks(text)
    assert len(chunks) > 2
    assert chunks[0][0] == ""
    assert all(heading == "# Finance\n## Billing" for heading, _ in chunks[1:])
    assert "".join(content for _, content in chunks[:1]).startswith("# Finance")
    built = build_chunks(
        space_id="s", tenant="t", path="p.md", document_id="d", version=1, content=text
    )
    assert built[1].indexed_text == f"# Finance\n## Billing\n\n{built[1].content}"
    assert built[0].indexed_text == built[0].content


_lines = st.sampled_from(
    ["# A", "## B", "### C", "```", "~~~", "text line", "more words here", "", "#x"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_lines, max_size=60), st.lists(_lines, max_size=20))
def test_appending_never_changes_an_earlier_chunks_trail(
    before: list[str], after: list[str]
) -> None:
    old = "\n".join(before) * 3
    new = old + "\n" + "\n".join(after)
    old_chunks, new_chunks = _chunks(old), _chunks(new)
    # Every chunk but the last one of the old text is unchanged, heading included.
    assert new_chunks[: max(len(old_chunks) - 1, 0)] == old_chunks[:-1]
