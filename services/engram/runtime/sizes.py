"""Byte sizes as people write them, read by one parser: pydantic's `ByteSize`.

Settings declare their sizes as `ByteSize` (so `ENGRAM_QUOTA_ORG=2GB` works) and the CLI
reads its arguments with `parse_size`: both accept plain bytes, decimal units (`kb`, `MB`,
`2GB` = 2,000,000,000) and binary ones (`KiB`, `512MiB`, `2GiB` = 2,147,483,648), case-
insensitive, with or without a space, fractions included (`1.5GiB`).
"""

from __future__ import annotations

# Sizes travel as int64 on the wire.
MAX_SIZE = 2**63 - 1


def parse_size(text: str) -> int:
    """The size `text` names in bytes; ValueError with what to write instead."""
    # pydantic is imported here, not above: the CLI imports this module and must start fast.
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        size = int(TypeAdapter(ByteSize).validate_python(text.strip()))
    except ValidationError:
        raise ValueError(
            f"cannot read {text[:40]!r} as a size: write bytes or a number with a unit, "
            "e.g. 500MB, 512MiB, 2GB, 2GiB"
        ) from None
    if size > MAX_SIZE:
        raise ValueError(f"{text[:40]!r} is too large: at most {MAX_SIZE} bytes")
    return size


def format_size(size: int) -> str:
    """`size` in binary units for people: "512 B", "1.5 KiB", "2.0 GiB" (the text of
    pydantic's `ByteSize.human_readable(separator=" ")`, without importing pydantic)."""
    number = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(number) < 1024:
            return f"{number:0.0f} {unit}" if unit == "B" else f"{number:0.1f} {unit}"
        number /= 1024
    return f"{number:0.1f} EiB"
