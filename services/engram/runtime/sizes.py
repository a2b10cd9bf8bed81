"""Byte sizes as people write them, read by one parser: pydantic's `ByteSize`.

Settings declare their sizes as `ByteSize` (so `ENGRAM_QUOTA_ORG=2GB` works) and the CLI
reads its arguments with `parse_size`: both accept plain bytes, decimal units (`kb`, `MB`,
`2GB` = 2,000,000,000) and binary ones (`KiB`, `512MiB`, `2GiB` = 2,147,483,648), case-
insensitive, with or without a space, fractions included (`1.5GiB`).
"""

from __future__ import annotations

from pydantic import ByteSize, TypeAdapter, ValidationError

# Sizes travel as int64 on the wire.
MAX_SIZE = 2**63 - 1

_BYTE_SIZE: TypeAdapter[ByteSize] = TypeAdapter(ByteSize)


def parse_size(text: str) -> int:
    """The size `text` names in bytes; ValueError with what to write instead."""
    try:
        size = int(_BYTE_SIZE.validate_python(text.strip()))
    except ValidationError:
        raise ValueError(
            f"cannot read {text[:40]!r} as a size: write bytes or a number with a unit, "
            "e.g. 500MB, 512MiB, 2GB, 2GiB"
        ) from None
    if size > MAX_SIZE:
        raise ValueError(f"{text[:40]!r} is too large: at most {MAX_SIZE} bytes")
    return size


def format_size(size: int) -> str:
    """`size` in binary units for people: "512 B", "1.5 KiB", "2.0 GiB"."""
    return ByteSize(size).human_readable(separator=" ")
