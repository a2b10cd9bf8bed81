"""The chunker: sizes, overlap, split preference, Unicode, and append-stability."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.domain.chunking import build_chunks, chunk_spans, chunk_text
from engram.domain.chunks import chunk_id

pytestmark = pytest.mark.unit

SIZE = 500
OVERLAP = 50


def _words(n: int, word: str = "word") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def _overlap_len(a: tuple[int, int], b: tuple[int, int]) -> int:
    return a[1] - b[0]


# --- basics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\n\n", " \t\r\n "])
def test_empty_or_whitespace_text_has_no_chunks(text: str) -> None:
    assert chunk_text(text) == []


def test_short_text_is_one_chunk_verbatim() -> None:
    text = "  # Title\n\nSome memory.\n"
    assert chunk_text(text) == [text]


def test_text_of_exactly_size_is_one_chunk() -> None:
    text = "a" * SIZE
    assert chunk_text(text) == [text]


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (-1, 0), (10, -1), (10, 10), (10, 11)])
def test_bad_parameters_are_refused(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk"):
        chunk_text("abc", size=size, overlap=overlap)


def test_every_chunk_fits_and_consecutive_chunks_overlap_about_overlap_chars() -> None:
    text = "\n\n".join(_words(40 + 7 * i) + "." for i in range(12))
    spans = chunk_spans(text)
    assert len(spans) > 5
    for a, b in spans:
        assert 0 < b - a <= SIZE
    for prev, nxt in zip(spans, spans[1:], strict=False):
        # The next chunk starts at the first word start in the last `overlap` characters.
        assert 0 < _overlap_len(prev, nxt) <= OVERLAP
        assert _overlap_len(prev, nxt) >= OVERLAP - len("word123 ")


def test_chunks_are_the_spans_slices() -> None:
    text = _words(400)
    assert chunk_text(text) == [text[a:b] for a, b in chunk_spans(text)]


def test_zero_overlap_tiles_the_text() -> None:
    text = _words(300)
    spans = chunk_spans(text, overlap=0)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for prev, nxt in zip(spans, spans[1:], strict=False):
        assert prev[1] == nxt[0]


def test_overlap_starts_on_a_word_boundary() -> None:
    text = _words(500)
    for i, chunk in enumerate(chunk_text(text)[1:], start=1):
        assert chunk.startswith("word"), (i, chunk[:20])


# --- split preference ------------------------------------------------------------------------


def test_paragraph_break_is_preferred_over_line_and_sentence() -> None:
    first = "Sentence one. Sentence two.\nline two. " + "x " * 100  # ~240 chars, no "\n\n"
    second = "Next paragraph. It goes on.\nAnother line. " + "y " * 200
    text = first + "\n\n" + second
    chunks = chunk_text(text)
    assert chunks[0] == first + "\n\n"


def test_line_break_is_preferred_over_sentence_end() -> None:
    line1 = "Alpha beta. Gamma delta. " * 6  # 150 chars of sentences
    line2 = "Epsilon zeta. Eta theta. " * 8  # 200 more
    text = line1 + "\n" + line2 + "Z" * 400
    assert chunk_text(text)[0] == line1 + "\n"


def test_sentence_end_is_preferred_over_a_hard_cut() -> None:
    text = "The first sentence is here. " * 30  # no newlines at all
    chunks = chunk_text(text)
    assert all(c.endswith(". ") for c in chunks[:-1])
    assert chunks[0] == text[: len(chunks[0])]
    assert SIZE - len("The first sentence is here. ") < len(chunks[0]) <= SIZE


def test_last_paragraph_break_in_the_window_wins() -> None:
    paragraph = _words(20)  # 129 characters
    text = "\n\n".join([paragraph] * 6)
    first = chunk_text(text)[0]
    # As many whole paragraphs (with their breaks) as fit in 500 characters.
    fit = SIZE // (len(paragraph) + 2)
    assert fit == 3
    assert first == (paragraph + "\n\n") * fit


def test_a_break_too_early_in_the_window_is_not_used() -> None:
    # A paragraph break after 20 characters would make a sliver; the line break later wins.
    text = "Short heading line\n\n" + "a" * 300 + "\n" + "b" * 400
    chunks = chunk_text(text)
    assert chunks[0] == "Short heading line\n\n" + "a" * 300 + "\n"


def test_one_long_line_without_separators_is_hard_cut_at_size() -> None:
    text = "x" * 1234
    spans = chunk_spans(text)
    assert [b - a for a, b in spans] == [500, 500, 334]
    # No word starts to land on: the overlap is exactly `overlap` characters.
    assert spans[1][0] == 450 and spans[2][0] == 900


def test_long_unbroken_line_with_spaces_still_fits() -> None:
    text = _words(2000, word="w")
    chunks = chunk_text(text)
    assert all(len(c) <= SIZE for c in chunks)
    assert all(len(c) == SIZE for c in chunks[:-1])


def test_small_sizes_work() -> None:
    text = "ab. cd. ef. gh.\nij\n\nkl"
    chunks = chunk_text(text, size=5, overlap=1)
    assert all(0 < len(c) <= 5 for c in chunks)
    assert "".join(chunks).replace(" ", "") != ""


# --- Unicode ---------------------------------------------------------------------------------


def test_unicode_is_counted_in_code_points() -> None:
    text = "日本語のテキスト。" * 200
    chunks = chunk_text(text)
    assert all(len(c) <= SIZE for c in chunks)
    assert chunks[0] == text[:SIZE]


def test_hard_cut_keeps_combining_marks_with_their_base() -> None:
    text = "e\u0301" * 400  # 800 code points, "é" in decomposed form
    for chunk in chunk_text(text):
        assert chunk[0] == "e"
        assert chunk[-1] == "\u0301"


def test_hard_cut_keeps_zwj_emoji_sequences_together() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 5 code points
    text = family * 300
    for chunk in chunk_text(text):
        assert chunk.startswith("\U0001f468")
        assert chunk.endswith("\U0001f467")


def test_emoji_and_accents_survive_verbatim() -> None:
    text = "Café naïve résumé 😀 " * 60
    spans = chunk_spans(text)
    assert all(text[a:b] == c for (a, b), c in zip(spans, chunk_text(text), strict=True))


# --- determinism and build_chunks -------------------------------------------------------------


def test_deterministic() -> None:
    text = "\n".join(_words(i % 37) for i in range(200))
    assert chunk_text(text) == chunk_text(text)
    assert chunk_spans(text) == chunk_spans(text)


def test_build_chunks_makes_indexed_records() -> None:
    content = _words(300)
    chunks = build_chunks(
        space_id="v1:project:t1:p::::notes",
        tenant="t1",
        path="notes/a.md",
        document_id="doc-1",
        version=7,
        content=content,
    )
    assert [c.content for c in chunks] == chunk_text(content)
    for i, c in enumerate(chunks):
        assert c.chunk_index == i
        assert c.chunk_id == chunk_id("doc-1", i)
        assert (c.space_id, c.tenant, c.path, c.document_id, c.doc_version) == (
            "v1:project:t1:p::::notes",
            "t1",
            "notes/a.md",
            "doc-1",
            7,
        )


def test_build_chunks_of_blank_content_is_empty() -> None:
    assert (
        build_chunks(
            space_id="s", tenant="", path="a.md", document_id="d", version=1, content="\n \n"
        )
        == []
    )


def test_append_changes_only_the_tail() -> None:
    base = "\n\n".join(_words(30 + i) for i in range(20))
    before = chunk_text(base)
    after = chunk_text(base + "\n\n[12:00:01] appended a new daily log entry.")
    assert after[: len(before) - 1] == before[:-1]


# --- properties ------------------------------------------------------------------------------

# Small alphabets make separators, word starts and whitespace runs frequent, which is where
# boundary decisions happen; larger sizes are covered by the example tests above.
_PIECES = st.sampled_from(
    ["a", "b", "c", " ", " ", "\n", "\n\n", ". ", ".", "é", "e\u0301", "\u200d", "😀", "\t"]
)
_TEXT = st.lists(_PIECES, max_size=400).map("".join)
_SIZED = st.integers(min_value=1, max_value=60).flatmap(
    lambda size: st.tuples(st.just(size), st.integers(min_value=0, max_value=size - 1))
)

_PROPS = settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROPS
@given(text=_TEXT, sized=_SIZED)
def test_every_chunk_is_within_size(text: str, sized: tuple[int, int]) -> None:
    size, overlap = sized
    for chunk in chunk_text(text, size=size, overlap=overlap):
        assert 0 < len(chunk) <= size
        assert not chunk.isspace()


@_PROPS
@given(text=_TEXT, sized=_SIZED)
def test_chunks_cover_the_text_in_order(text: str, sized: tuple[int, int]) -> None:
    size, overlap = sized
    spans = chunk_spans(text, size=size, overlap=overlap)
    assert [text[a:b] for a, b in spans] == chunk_text(text, size=size, overlap=overlap)
    covered = [False] * len(text)
    for i, (a, b) in enumerate(spans):
        assert 0 <= a < b <= len(text)
        if i + 1 < len(spans):
            nxt = spans[i + 1]
            # Strictly forward, never skipping anything but whitespace, sharing <= overlap.
            assert a < nxt[0] <= b or text[b : nxt[0]].isspace()
            assert b - nxt[0] <= overlap
        for i in range(a, b):
            covered[i] = True
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


def _assert_append_stable(text: str, appended: str, size: int, overlap: int) -> None:
    before = chunk_text(text, size=size, overlap=overlap)
    after = chunk_text(text + appended, size=size, overlap=overlap)
    # The architecture's promise: all but the last two chunks survive an append.
    assert after[: max(len(before) - 2, 0)] == before[:-2]
    # What this chunker guarantees by construction: all but the last one survive.
    assert after[: max(len(before) - 1, 0)] == before[:-1]


@_PROPS
@given(text=_TEXT, appended=_TEXT, sized=_SIZED)
def test_append_stability(text: str, appended: str, sized: tuple[int, int]) -> None:
    _assert_append_stable(text, appended, *sized)


_SENTENCE_TEXT = st.lists(
    st.sampled_from(["The cat sat", " on the mat", ". ", "\n", "\n\n", " and ran", ", then"]),
    max_size=200,
).map("".join)


@_PROPS
@given(
    text=_SENTENCE_TEXT,
    appended=st.sampled_from(["ran off", " slept", "s", ".", ". Then", "\n", "\n\nNew", " "]),
    sized=_SIZED,
)
def test_append_stability_mid_sentence(text: str, appended: str, sized: tuple[int, int]) -> None:
    _assert_append_stable(text, appended, *sized)


@_PROPS
@given(
    text=_SENTENCE_TEXT,
    line=st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\n"),
        max_size=120,
    ),
    sized=_SIZED,
)
def test_append_stability_of_one_line(text: str, line: str, sized: tuple[int, int]) -> None:
    _assert_append_stable(text, "\n" + line, *sized)
    _assert_append_stable(text, line + "\n", *sized)


@settings(max_examples=60, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["word ", "other. ", "\n", "\n\n", "long" * 30]), max_size=900
    ).map("".join),
    appended=_SENTENCE_TEXT,
)
def test_append_stability_at_production_size(text: str, appended: str) -> None:
    _assert_append_stable(text, appended, SIZE, OVERLAP)


def test_a_section_starts_a_new_chunk() -> None:
    template = (
        "# MEMORY.md\n\nCurated, durable memory.\n\n## Facts\n\n## Preferences\n\n## Decisions\n"
    )
    fact = "The user's dog is a beagle called Biscuit.\n"
    chunks = chunk_text(template + fact, size=500, overlap=50)
    # Headings with nothing under them stay with the next section's text; no overlap.
    assert chunks == [
        "# MEMORY.md\n\nCurated, durable memory.\n\n",
        "## Facts\n\n## Preferences\n\n## Decisions\n" + fact,
    ]
    # A heading in a fenced code block is not a section, nor is one whose line is unfinished.
    fenced = "Intro text.\n```\n# not a heading\n```\nmore"
    assert chunk_text(fenced, size=500, overlap=50) == [fenced]
    assert chunk_text("Intro text.\n## Unfinished", size=500, overlap=50) == [
        "Intro text.\n## Unfinished"
    ]
