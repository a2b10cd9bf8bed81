"""The Markdown headings a chunk sits under: context the indexes see with each chunk.

A chunk cut from the middle of a document has lost its title and section names, which are
often exactly the words a query uses ("what did we decide about billing?" against a chunk
under `## Billing`). So each chunk carries its heading trail - the ATX headings (`#` to
`######`) in force where it starts, outermost first, e.g. `"# Project X\\n## Billing"` -
and the keyword and vector indexes index it together with the chunk's text. Search results
still return the chunk's own text.

Only headings that start before the chunk count (a heading inside the chunk is already in
its text), so an append never changes an earlier chunk's trail. Lines inside fenced code
blocks are not headings. Each heading is cut to `MAX_HEADING_CHARS` and a trail keeps its
innermost headings within `MAX_TRAIL_CHARS`, so a pathological document cannot make every
chunk's indexed text balloon.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence

MAX_HEADING_CHARS = 120
MAX_TRAIL_CHARS = 300

_LINE = re.compile(r"[^\n]*(?:\n|$)")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+([^\n]*?))?[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# An optional closing run of `#`s, which needs a space before it (`# C#` keeps its `#`).
_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")


def heading_trails(text: str, starts: Sequence[int]) -> list[str]:
    """The heading trail at each offset in `starts` (ascending): the headings whose line
    begins before that offset, outermost first, one per line; "" where there is none."""
    offsets, trails = _trail_changes(text)
    result: list[str] = []
    for start in starts:
        i = bisect.bisect_left(offsets, start) - 1
        result.append(trails[i] if i >= 0 else "")
    return result


def heading_lines(text: str) -> list[int]:
    """The offsets of the ATX heading lines of `text` (fenced code excluded), ascending."""
    return _trail_changes(text)[0]


def _trail_changes(text: str) -> tuple[list[int], list[str]]:
    """Each heading's line offset and the trail in force after it."""
    offsets: list[int] = []
    trails: list[str] = []
    stack: list[tuple[int, str]] = []
    fence = ""
    if "#" not in text:
        return offsets, trails
    for match in _LINE.finditer(text):
        line = match.group().rstrip("\n")
        if not line and match.start() == len(text):
            break
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        heading = _ATX.match(line)
        if heading is None:
            continue
        level = len(heading.group(1))
        title = _CLOSING.sub("", heading.group(2) or "").strip()
        if not title:
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, f"{heading.group(1)} {title[:MAX_HEADING_CHARS]}"))
        offsets.append(match.start())
        trails.append(_bounded(line for _, line in stack))
    return offsets, trails


def _bounded(lines: Iterable[str]) -> str:
    kept: list[str] = []
    total = 0
    for line in reversed(list(lines)):
        total += len(line) + 1
        if total > MAX_TRAIL_CHARS + 1:
            break
        kept.append(line)
    return "\n".join(reversed(kept))
