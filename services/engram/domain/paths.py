"""Document paths: one canonical spelling per document.

A path is relative, `/`-separated, NFC, at most 512 bytes and 16 segments, has no empty,
`.` or `..` segments, no `\\`, NUL or control characters, and ends in `.md`. A path that is
not already canonical is refused with a message naming the canonical form when one exists.
"""

from __future__ import annotations

import unicodedata

from engram.domain.errors import InvalidPath, clip, quoted
from engram.domain.text_rules import describe_char, first_forbidden_char, utf8_len

MAX_PATH_BYTES = 512
MAX_SEGMENTS = 16
MARKDOWN_SUFFIX = ".md"


def canonical_form(path: str) -> str | None:
    """The canonical spelling of `path`, or None when it escapes the root or is empty.

    NFC-normalises, turns `\\` into `/`, drops empty and `.` segments and resolves `..`.
    """
    segments: list[str] = []
    for segment in unicodedata.normalize("NFC", path).replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                return None
            segments.pop()
            continue
        segments.append(segment)
    return "/".join(segments) or None


def _refuse_non_canonical(path: str, what: str, field: str) -> None:
    canonical = canonical_form(path)
    if canonical is None:
        if ".." in path.replace("\\", "/").split("/"):
            raise InvalidPath(f"{what} {quoted(path)} escapes the space root", field=field)
        raise InvalidPath(f"{what} must not be empty", field=field)
    raise InvalidPath(
        f'{what} {quoted(path)} is not canonical: use "{clip(canonical)}"', field=field
    )


def _check_characters(path: str, what: str, field: str) -> None:
    if "\x00" in path:
        raise InvalidPath(f"{what} must not contain NUL", field=field)
    char = first_forbidden_char(path)
    if char is not None:
        raise InvalidPath(
            f"{what} must not contain control or invisible characters "
            f"(found {describe_char(char)})",
            field=field,
        )


def _check_shape(path: str, what: str, field: str) -> list[str]:
    _check_characters(path, what, field)
    if canonical_form(path) != path:
        _refuse_non_canonical(path, what, field)
    size = utf8_len(path)
    if size > MAX_PATH_BYTES:
        raise InvalidPath(
            f"{what} is {size} bytes; at most {MAX_PATH_BYTES} are allowed", field=field
        )
    segments = path.split("/")
    if len(segments) > MAX_SEGMENTS:
        raise InvalidPath(
            f"{what} has {len(segments)} segments; at most {MAX_SEGMENTS} are allowed",
            field=field,
        )
    for segment in segments:
        if segment != segment.strip():
            raise InvalidPath(
                f"{what} segment {quoted(segment)} must not start or end with whitespace",
                field=field,
            )
    return segments


def validate_document_path(path: str, *, field: str = "path") -> str:
    """Returns `path` if canonical; raises InvalidPath saying what to use instead."""
    if not path:
        raise InvalidPath('path is required (for example "MEMORY.md")', field=field)
    segments = _check_shape(path, "path", field)
    leaf = segments[-1]
    if not leaf.endswith(MARKDOWN_SUFFIX) or leaf == MARKDOWN_SUFFIX:
        hint = ""
        if leaf.lower().endswith(MARKDOWN_SUFFIX) and leaf != MARKDOWN_SUFFIX.upper():
            hint = f': use "{path[: -len(MARKDOWN_SUFFIX)]}{MARKDOWN_SUFFIX}"'
        raise InvalidPath(
            f"path {quoted(path)} must name a Markdown file ending in {MARKDOWN_SUFFIX}{hint}",
            field=field,
        )
    return path


def validate_directory(directory: str, *, field: str = "dir") -> str:
    """Returns a canonical directory prefix ('' for the root); raises InvalidPath otherwise."""
    if directory == "":
        return directory
    _check_shape(directory, "dir", field)
    return directory


def parent_directory(path: str) -> str:
    """`a/b/c.md` -> `a/b`; `c.md` -> ``."""
    head, _, _ = path.rpartition("/")
    return head


def is_within(path: str, directory: str) -> bool:
    """True when `path` lies under `directory` ('' = the root)."""
    return directory == "" or path.startswith(directory + "/")


def directory_upper_bound(directory: str) -> str:
    """The smallest string greater than every path under `directory`.

    `/` (0x2F) is followed by `0` (0x30) in byte order, so every `dir/...` sorts below `dir0`
    in both SQLite's BINARY collation and MongoDB's string order.
    """
    return directory + "0"


def renamed_path(path: str, attempt: int) -> str:
    """`notes/a.md`, 2 -> `notes/a-2.md`: the RENAME import strategy's candidate names."""
    stem = path[: -len(MARKDOWN_SUFFIX)]
    return f"{stem}-{attempt}{MARKDOWN_SUFFIX}"
