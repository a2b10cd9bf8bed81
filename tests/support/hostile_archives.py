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


def many_documents(count: int = 300, size: int = MIB) -> Iterator[bytes]:
    """`count` valid documents of `size` bytes of one repeated phrase: 318 KB of gzip that
    expands past the 256 MiB import limit once 256 of them are read (issue 29's archive)."""
    body = (b"lorem ipsum " * (size // 12 + 1))[:size]

    def tar() -> Iterator[bytes]:
        for index in range(count):
            yield tar_header(f"bomb/{index}.md".encode(), size)
            yield body + b"\x00" * (padded(size) - size)
        yield from _end()

    return gzip_stream(tar(), level=9)


# An AWS access key id of the published shape (the credential scan refuses it).
CREDENTIAL = b"AKIAQ3EGUK5EXAMPLE7Z"


def credential_after(clean: int = 64, size: int = MIB) -> Iterator[bytes]:
    """`clean` valid documents of `size` bytes, then one carrying a credential: refused
    with everything before it read and held."""
    body = (b"notes on the deploy " * (size // 20 + 1))[:size]

    def tar() -> Iterator[bytes]:
        for index in range(clean):
            yield tar_header(f"clean/{index}.md".encode(), size)
            yield body + b"\x00" * (padded(size) - size)
        leaked = b"the key is " + CREDENTIAL + b"\n"
        yield tar_header(b"leak.md", len(leaked))
        yield leaked + b"\x00" * (padded(len(leaked)) - len(leaked))
        yield from _end()

    return gzip_stream(tar(), level=9)


def repeated_paragraphs(count: int, size: int = MIB, *, prefix: str = "doc") -> Iterator[bytes]:
    """`count` valid documents of `size` bytes, each one paragraph repeated: every chunk
    of them has the same text, so the indexer embeds it once (a large space that is cheap
    to index)."""
    paragraph = (b"the quarterly plan covers billing, search and the agent runtime. " * 8)[
        :440
    ] + b"\n\n"
    body = (paragraph * (size // len(paragraph) + 1))[:size]

    def tar() -> Iterator[bytes]:
        for index in range(count):
            yield tar_header(f"{prefix}/{index}.md".encode(), size)
            yield body + b"\x00" * (padded(size) - size)
        yield from _end()

    return gzip_stream(tar(), level=9)


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
