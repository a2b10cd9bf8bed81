"""Character rules shared by SpaceRef fields and document paths."""

from __future__ import annotations

import unicodedata

# Control, format, line/paragraph separators, surrogates, private use and unassigned code points.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def first_forbidden_char(value: str) -> str | None:
    """Returns the first control or invisible character in `value`, or None."""
    for char in value:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            return char
    return None


def describe_char(char: str) -> str:
    """Names a character for an error message without printing it raw."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def utf8_len(value: str) -> int:
    return len(value.encode("utf-8"))
