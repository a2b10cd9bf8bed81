"""Pure rules every index adapter shares: path-prefix scopes and query bounding.

Path prefixes are directory prefixes, in search and in all four index adapters (tantivy,
OpenSearch, the embedded vector index, Qdrant). A chunk of `notes/2026/a.md` carries the
scopes `notes`, `notes/2026` and `notes/2026/a.md` (every ancestor directory, and the path
itself), and a search with `path_prefix` matches the chunks that carry the normalised prefix as a
scope. So `"notes"`, `"notes/"` and `"/notes/"` match `notes/a.md` and `notes/x/b.md` but
not `notesX.md`, `notes.md` or `notes2/a.md`; `"notes/2026/a.md"` matches that one
document; a partial segment (`"notes/20"`) matches nothing; an empty prefix (or `"/"`)
matches everything. The filter is then one exact term on an indexed multi-value field.
"""

from __future__ import annotations

import re

# Field holding `path_scopes(path)` in every adapter. It also holds the path itself, so a
# file path used as a prefix selects that document.
PATH_SCOPES_FIELD = "path_dirs"

# Tokens kept whole for exact identifier matching: words joined by `-`, `.`, `/` or `:`
# (`deploy-2026-03-03`, `v1.2.3`, `api.example.com/v2`) and words containing `_`
# (`ERR_4021`, `snake_case`). Plain words never match, so this field only holds the
# identifiers the stemming analyzers would split apart. Tantivy (Rust regex) reads `\w` as
# Unicode; OpenSearch (Java regex) needs the `(?U)` flag for the same meaning.
IDENTIFIER_PATTERN = r"\w+(?:[-./:]\w+)+|\w*_\w*"

# Bounds on a query's text, so a pasted paragraph cannot turn into thousands of clauses
# (OpenSearch refuses more than 1024 leaf clauses; CJK text yields one token per character).
MAX_QUERY_CHARS = 512
MAX_QUERY_WORDS = 128

_WORD = re.compile(r"\w+")


def path_scopes(path: str) -> list[str]:
    """Every ancestor directory of `path`, then `path` itself: `a/b/c.md` -> `a`, `a/b`,
    `a/b/c.md`."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def normalize_path_prefix(path_prefix: str) -> str:
    """The scope a `path_prefix` selects: leading and trailing `/` removed; `""` = no filter."""
    return path_prefix.strip("/")


def bound_query(query: str) -> str:
    """`query` cut after `MAX_QUERY_WORDS` words and `MAX_QUERY_CHARS` characters."""
    text = query[:MAX_QUERY_CHARS]
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == MAX_QUERY_WORDS:
            return text[: match.end()]
    return text
