"""Splitting a document into the chunks the keyword and vector indexes hold (ARCHITECTURE §4).

The chunker is a greedy left-to-right scan. A chunk starting at `s` ends before the first
Markdown heading line inside its window that follows some text of its own (a section starts
a new chunk, so a fact appended under `## Decisions` is not diluted by the sections before
it; the next chunk starts at the heading, without overlap). The heading's whole line, up to
its line break, must lie in the window, so an append cannot turn an earlier line into one.
Otherwise it ends at the last paragraph break (`"\\n\\n"`) inside the window
`text[s : s + size]`, else the last line break, else the last sentence end (`". "`), else at
a hard cut after `size` characters
(moved back, if needed, so it never splits a base character from its combining marks).
A separator only counts if it leaves the chunk at least `_min_fill(size, overlap)`
characters long, so chunks do not degenerate into slivers. The next chunk starts about
`overlap` characters before the end, at the first word start in `text[end - overlap : end]`.

Append-stability holds by construction: whether a chunk is the last one, where it ends and
where the next one starts are decided only by the characters of its own window, which an
append cannot change for any chunk whose window lies wholly inside the old text. Only the
old last chunk (the one that ran to the end of the text) can differ after an append, so
`chunk_text(t)[:-1]` is always a prefix of `chunk_text(t + a)` — one better than the two
chunks the architecture allows. There is deliberately no merging of a short last chunk into
its predecessor: that would let the length of the whole text move an earlier boundary.

"Characters" are Python `str` code points. Chunks are exact slices of the text (nothing is
stripped or rewritten); chunks made only of whitespace are dropped.
"""

from __future__ import annotations

import bisect
import unicodedata

from engram.domain.chunks import Chunk, chunk_id
from engram.domain.headings import heading_lines, heading_trails

DEFAULT_CHUNK_SIZE = 500
DEFAULT_CHUNK_OVERLAP = 50

# Split preference, best first; each separator stays at the end of the chunk it closes.
SEPARATORS: tuple[str, ...] = ("\n\n", "\n", ". ")

# A hard cut steps back over at most this many characters to keep a grapheme together.
_MAX_GRAPHEME_BACKOFF = 16

_ZWJ = "\u200d"


def chunk_spans(
    text: str, *, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[tuple[int, int]]:
    """The `(start, end)` offsets of `chunk_text(text, size=size, overlap=overlap)`.

    Raises:
        ValueError: `size` < 1, `overlap` < 0, or `overlap` >= `size`.
    """
    _check(size, overlap)
    spans: list[tuple[int, int]] = []
    n = len(text)
    headings = heading_lines(text) if "#" in text else []
    start = 0
    while start < n:
        section = _section_end(text, start, size, headings)
        if section is not None:
            end = section
        elif n - start <= size:
            end = n
        else:
            end = _chunk_end(text, start, size, overlap)
        if not text[start:end].isspace():
            spans.append((start, end))
        if end == n:
            break
        start = end if section is not None else _next_start(text, start, end, overlap)
    return spans


def _section_end(text: str, start: int, size: int, headings: list[int]) -> int | None:
    """The offset of the first heading line after `start` whose line ends inside the window
    and which follows some non-heading text of the chunk; None when there is none."""
    limit = min(start + size, len(text))
    i = bisect.bisect_right(headings, start)
    while i < len(headings) and headings[i] < limit:
        at = headings[i]
        if text.find("\n", at, limit) < 0:
            return None
        if _has_body(text[start:at], headings, start):
            return at
        i += 1
    return None


def _has_body(chunk: str, headings: list[int], start: int) -> bool:
    """Whether `chunk` (at `start`) holds a non-blank line that is not a heading."""
    first = bisect.bisect_left(headings, start)
    inside = set(headings[first : bisect.bisect_left(headings, start + len(chunk))])
    offset = start
    for line in chunk.split("\n"):
        if line.strip() and offset not in inside:
            return True
        offset += len(line) + 1
    return False


def chunk_text(
    text: str, *, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[str]:
    """Splits `text` into chunks of at most `size` characters, consecutive chunks sharing
    about `overlap` characters; `[]` for empty or whitespace-only text.

    Raises:
        ValueError: `size` < 1, `overlap` < 0, or `overlap` >= `size`.
    """
    return [text[a:b] for a, b in chunk_spans(text, size=size, overlap=overlap)]


def build_chunks(
    *,
    space_id: str,
    tenant: str,
    path: str,
    document_id: str,
    version: int,
    content: str,
    size: int = DEFAULT_CHUNK_SIZE,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
) -> list[Chunk]:
    """The `Chunk` records of one document version, indexed from 0 in text order, each with
    the heading trail it sits under."""
    spans = chunk_spans(content, size=size, overlap=overlap)
    trails = heading_trails(content, [start for start, _ in spans])
    return [
        Chunk(
            chunk_id=chunk_id(document_id, i),
            document_id=document_id,
            space_id=space_id,
            tenant=tenant,
            path=path,
            chunk_index=i,
            doc_version=version,
            content=content[start:end],
            heading=trail,
        )
        for i, ((start, end), trail) in enumerate(zip(spans, trails, strict=True))
    ]


def _check(size: int, overlap: int) -> None:
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    if overlap < 0:
        raise ValueError(f"chunk overlap must not be negative, got {overlap}")
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than the size ({size})")


def _min_fill(size: int, overlap: int) -> int:
    """The shortest chunk a separator may close: past the overlap (so the scan always moves
    forward) and at least a quarter of the size (so paragraphs are not cut into slivers)."""
    return max(overlap + 1, size // 4)


def _chunk_end(text: str, start: int, size: int, overlap: int) -> int:
    """End of a chunk that cannot take the rest of the text (more than `size` characters
    remain); reads only `text[start : start + size + 1]`, all of it present before any append."""
    limit = start + size
    earliest = start + _min_fill(size, overlap)
    for sep in SEPARATORS:
        # rfind's bounds keep the whole separator inside the window.
        at = text.rfind(sep, earliest - len(sep), limit)
        if at >= 0:
            return at + len(sep)
    return _hard_cut(text, start, limit)


def _hard_cut(text: str, start: int, limit: int) -> int:
    """`limit`, or a little earlier so a combining mark, variation selector or ZWJ sequence
    stays with its base character.

    Reads `text[limit]`, one character past the window: it exists (the caller knows more
    than `size` characters remain), so it belongs to the text before any append.
    """
    floor = max(start + 1, limit - _MAX_GRAPHEME_BACKOFF)
    cut = limit
    while cut > floor and _joins_previous(text, cut):
        cut -= 1
    return limit if _joins_previous(text, cut) else cut


def _joins_previous(text: str, i: int) -> bool:
    """Whether `text[i]` belongs to the same grapheme as `text[i - 1]`."""
    ch = text[i]
    if text[i - 1] == _ZWJ or ch == _ZWJ:
        return True
    if unicodedata.combining(ch):
        return True
    code = ord(ch)
    # Variation selectors and emoji skin-tone modifiers.
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x1F3FB <= code <= 0x1F3FF


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Start of the chunk after `text[start:end]`: the first word start in its last `overlap`
    characters, else `end - overlap` (one long token), else `end` (only whitespace there).
    Reads only the previous chunk, so it never depends on what follows."""
    lo = max(start + 1, end - overlap)
    for i in range(lo, end):
        if not text[i].isspace() and text[i - 1].isspace():
            return i
    if lo >= end or text[lo:end].isspace():
        return end
    return lo
