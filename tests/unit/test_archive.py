"""Archives: written incrementally, read whole, refused whole on the first bad entry."""

from __future__ import annotations

import io
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from engram.domain.errors import (
    ContentTooLarge,
    InvalidArchive,
    InvalidContent,
    InvalidPath,
    SecretInContent,
)
from engram.storage.archive import (
    INFLATE_STEP,
    MAX_METADATA_BYTES,
    ArchiveEntry,
    ArchiveLimits,
    ArchiveReader,
    ArchiveWriter,
    parse_pax,
    read_archive,
)
from tests.support import hostile_archives

pytestmark = pytest.mark.unit

LIMITS = ArchiveLimits(max_entries=100, max_doc_bytes=1024, max_bytes=100_000)


def make_tar(entries: list[tuple[str, bytes]], *, kind: bytes = tarfile.REGTYPE) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
                info.size = 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buffer.getvalue()


def test_writer_output_reads_back() -> None:
    writer = ArchiveWriter()
    at = datetime(2026, 3, 3, tzinfo=UTC)
    data = writer.add("MEMORY.md", "# hi\n", at) + writer.add("d/x.md", "é", at) + writer.close()
    entries = read_archive(data, LIMITS)
    assert [(e.path, e.content) for e in entries] == [("MEMORY.md", "# hi\n"), ("d/x.md", "é")]


def test_leading_dot_slash_is_accepted() -> None:
    entries = read_archive(make_tar([("./MEMORY.md", b"x")]), LIMITS)
    assert entries[0].path == "MEMORY.md"


@pytest.mark.parametrize(
    ("entries", "error", "fragment"),
    [
        ([("ok.md", b"x"), ("../evil.md", b"x")], InvalidPath, "escapes"),
        ([("ok.md", b"x"), ("image.png", b"x")], InvalidPath, "Markdown"),
        ([("ok.md", b"x"), ("big.md", b"x" * 1025)], ContentTooLarge, "1025"),
        ([("ok.md", b"x"), ("bad.md", b"\xff\xfe")], InvalidContent, "UTF-8"),
        ([("s.md", b"AKIAQ3EGUK5EXAMPLE7Z")], SecretInContent, "AWS"),
        ([("a.md", b"x"), ("./a.md", b"y")], InvalidArchive, "two entries"),
        ([("a//b.md", b"x")], InvalidPath, 'use "a/b.md"'),
    ],
)
def test_bad_entries_refuse_the_whole_archive(
    entries: list[tuple[str, bytes]], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as caught:
        read_archive(make_tar(entries), LIMITS)
    assert fragment in str(caught.value)
    assert "nothing was imported" in str(caught.value) or "two entries" in str(caught.value)


def test_links_are_refused() -> None:
    with pytest.raises(InvalidArchive, match="not a regular file"):
        read_archive(make_tar([("link.md", b"")], kind=tarfile.SYMTYPE), LIMITS)


# --- skip_unsupported: what engram cannot store is reported, the rest imported ---------------


def outcomes(entries: list[ArchiveEntry]) -> list[tuple[str, str, bool]]:
    """(path, content, left out?) per entry, in archive order."""
    return [(e.path, e.content, bool(e.unsupported)) for e in entries]


def test_skip_unsupported_leaves_out_non_markdown_entries_in_archive_order() -> None:
    data = make_tar(
        [
            ("notes/a.md", b"a"),
            ("./picture.png", b"\x89PNG" * 400),  # over max_doc_bytes: skipped, not refused
            ("README.MD", b"shouting"),
            (".git/config", b"[core]"),
            ("b.md", b"b"),
        ]
    )
    entries = read_archive(data, LIMITS, skip_unsupported=True)
    assert outcomes(entries) == [
        ("notes/a.md", "a", False),
        ("picture.png", "", True),
        ("README.MD", "", True),
        (".git/config", "", True),
        ("b.md", "b", False),
    ]
    assert "not a Markdown file" in entries[1].unsupported
    with pytest.raises(InvalidPath, match="Markdown"):
        read_archive(data, LIMITS)  # without the option the archive is refused whole


def test_skip_unsupported_leaves_out_links() -> None:
    entries = read_archive(
        make_tar([("link.md", b"")], kind=tarfile.SYMTYPE), LIMITS, skip_unsupported=True
    )
    assert outcomes(entries) == [("link.md", "", True)]
    assert "symbolic link" in entries[0].unsupported


def test_skip_unsupported_still_refuses_vendor_entry_types() -> None:
    """A GNU sparse member may be followed by blocks its size does not count: it cannot be
    read past safely, so it refuses the archive whatever the option says."""
    tar = hostile_archives.tar_header(b"holes.bin", 0, kind=b"S") + b"\0" * 1024
    data = b"".join(hostile_archives.gzip_stream([tar]))
    with pytest.raises(InvalidArchive, match="unknown type"):
        read_archive(data, LIMITS, skip_unsupported=True)


def test_skipped_data_is_read_past_not_kept() -> None:
    """A skipped member's declared data is consumed in bounded steps and counted against
    the archive's size limit, never held."""
    big = 3 * INFLATE_STEP
    tar = hostile_archives.tar_header(b"blob.bin", big) + b"\0" * big
    tar += hostile_archives.tar_header(b"a.md", 1) + b"a" + b"\0" * 511 + b"\0" * 1024
    compressed = b"".join(hostile_archives.gzip_stream([tar]))
    reader = ArchiveReader(replace(SERVER_LIMITS, max_doc_bytes=10), skip_unsupported=True)
    for start in range(0, len(compressed), 64):
        reader.feed(compressed[start : start + 64])
        assert len(reader._data) <= 1  # the skipped member's bytes are never gathered
    assert outcomes(reader.finish()) == [("blob.bin", "", True), ("a.md", "a", False)]
    with pytest.raises(InvalidArchive, match="expands to more than"):
        read_archive(
            b"".join(hostile_archives.gzip_stream([tar])),
            replace(SERVER_LIMITS, max_bytes=big),
            skip_unsupported=True,
        )


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        ([("ok.md", b"x"), ("../evil.md", b"x")], InvalidPath),
        ([("ok.md", b"x"), ("big.md", b"x" * 1025)], ContentTooLarge),
        ([("ok.md", b"x"), ("bad.md", b"\xff\xfe")], InvalidContent),
        ([("ok.png", b"x"), ("s.md", b"AKIAQ3EGUK5EXAMPLE7Z")], SecretInContent),
    ],
)
def test_a_bad_markdown_entry_still_refuses_the_archive(
    entries: list[tuple[str, bytes]], error: type[Exception]
) -> None:
    with pytest.raises(error, match="nothing was imported"):
        read_archive(make_tar(entries), LIMITS, skip_unsupported=True)


def test_an_agent_workspace_leaves_out_its_runtime_files() -> None:
    workspace = [
        ("AGENTS.md", b"rules"),
        ("BOOTSTRAP.md", b"first run"),
        ("HEARTBEAT.md", b"- check mail"),
        ("memory/2026-01-01.md", b"day"),
        ("notes/HEARTBEAT.md", b"a note of that name"),
    ]
    entries = read_archive(make_tar(workspace), LIMITS, skip_unsupported=True)
    assert outcomes(entries) == [
        ("AGENTS.md", "rules", False),
        ("BOOTSTRAP.md", "", True),
        ("HEARTBEAT.md", "", True),
        ("memory/2026-01-01.md", "day", False),
        ("notes/HEARTBEAT.md", "a note of that name", False),
    ]
    assert "onboarding" in entries[1].unsupported and "status" in entries[2].unsupported
    # Not a workspace (no marker file at the root): they are ordinary documents.
    plain = read_archive(make_tar(workspace[1:]), LIMITS, skip_unsupported=True)
    assert not any(e.unsupported for e in plain)
    # Without the option nothing is left out.
    assert not any(e.unsupported for e in read_archive(make_tar(workspace), LIMITS))


def test_not_a_tarball_is_refused_cleanly() -> None:
    with pytest.raises(InvalidArchive, match="not a readable"):
        read_archive(b"definitely not gzip", LIMITS)


def test_total_and_count_limits() -> None:
    many = [(f"f{i}.md", b"x") for i in range(101)]
    with pytest.raises(InvalidArchive, match="more than 100 entries"):
        read_archive(make_tar(many), replace(LIMITS, max_bytes=10**6))
    # The limit counts the uncompressed tar stream (headers and padding too).
    heavy = [(f"f{i}.md", b"x" * 1000) for i in range(99)]
    with pytest.raises(InvalidArchive, match="expands to more than 100000 bytes"):
        read_archive(make_tar(heavy), LIMITS)


# --- hostile bytes: every refusal comes from the headers, before the declared data is read ---

SERVER_LIMITS = ArchiveLimits(max_entries=10_000, max_doc_bytes=2 << 20, max_bytes=256 << 20)


def feed_all(pieces: Iterator[bytes], limits: ArchiveLimits = SERVER_LIMITS) -> tuple[int, int]:
    """Feeds until refused; returns (compressed bytes fed, uncompressed bytes seen)."""
    reader = ArchiveReader(limits)
    fed = 0
    for piece in pieces:
        fed += len(piece)
        reader.feed(piece)
    reader.finish()
    return fed, reader.uncompressed_bytes


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("pax_120k_digits", "pax header of 120000 bytes"),
        ("pax_declares_1gib", "pax header of 1073741824 bytes"),
        ("gnu_long_name_256mib", "GNU long name of 268435456 bytes"),
        ("gzip_2gib_zeros", "expands to more than 268435456 bytes"),
        ("100k_empty_entries", "more than 10000 entries"),
    ],
)
def test_attack_archives_are_refused(name: str, fragment: str) -> None:
    reader = ArchiveReader(SERVER_LIMITS)
    with pytest.raises(InvalidArchive, match=fragment):
        for piece in hostile_archives.ATTACKS[name]():
            reader.feed(piece)
        reader.finish()
    # Refused while reading, not after: at most the cap was decompressed.
    assert reader.uncompressed_bytes <= SERVER_LIMITS.max_bytes + 256 * 1024


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    length += len(str(length + len(body))) - 1
    return str(length).encode() + body


def test_pax_records_are_parsed_linearly() -> None:
    records = pax_record("path", "d/\u00e9t\u00e9.md") + pax_record("mtime", "123.5")
    assert parse_pax(records + b"\0\0") == {
        "path": "d/\u00e9t\u00e9.md",
        "mtime": "123.5",
    }
    started = time.process_time()
    for bad in (b"1" * (MAX_METADATA_BYTES - 1), b"99999 k=v\n", b"9 kv\n\n\n\n", b"x"):
        with pytest.raises(InvalidArchive):
            parse_pax(bad)
    assert time.process_time() - started < 0.5  # the CVE-2024-6232 shape is rejected at once


def test_pax_and_gnu_names_from_tarfile_are_read() -> None:
    long_name = "d/" + "\u00e9" * 60 + "/" + "n" * 150 + ".md"
    for tar_format in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tar_format) as tar:
            info = tarfile.TarInfo(long_name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
        entries = read_archive(buffer.getvalue(), SERVER_LIMITS)
        assert [(e.path, e.content) for e in entries] == [(long_name, "hi")]


def test_sparse_long_link_and_unknown_types_are_refused() -> None:
    for kind, fragment in ((b"S", "unknown type"), (b"K", "not a regular file"), (b"V", "unknown")):
        tar = hostile_archives.tar_header(b"x.md", 6 if kind == b"K" else 0, kind)
        if kind == b"K":  # a GNU long link precedes a link entry
            tar += b"target" + b"\0" * 506 + hostile_archives.tar_header(b"x.md", 0, b"2")
        data = b"".join(hostile_archives.gzip_stream([tar + b"\0" * 1024]))
        with pytest.raises(InvalidArchive, match=fragment):
            read_archive(data, SERVER_LIMITS)
    pax = pax_record("GNU.sparse.major", "1")
    tar = hostile_archives.tar_header(b"p", len(pax), b"x") + pax.ljust(512, b"\0")
    tar += hostile_archives.tar_header(b"x.md", 0) + b"\0" * 1024
    with pytest.raises(InvalidArchive, match="sparse"):
        read_archive(b"".join(hostile_archives.gzip_stream([tar])), SERVER_LIMITS)


def test_truncated_and_concatenated_gzip() -> None:
    data = make_tar([("a.md", b"x" * 600)])
    with pytest.raises(InvalidArchive, match="truncated"):
        read_archive(data[: len(data) // 2], SERVER_LIMITS)
    # Two gzip members are one stream (cat a.gz b.gz): the tar spans them.
    tar = zlib.decompress(data, 16 + zlib.MAX_WBITS)
    halves = [tar[:700], tar[700:]]
    joined = b"".join(b"".join(hostile_archives.gzip_stream([half])) for half in halves)
    assert [e.content for e in read_archive(joined, SERVER_LIMITS)] == ["x" * 600]


def test_bad_checksum_is_not_a_tarball() -> None:
    header = bytearray(hostile_archives.tar_header(b"a.md", 0))
    header[0] = ord("b")
    data = b"".join(hostile_archives.gzip_stream([bytes(header) + b"\0" * 1024]))
    with pytest.raises(InvalidArchive, match="checksum"):
        read_archive(data, SERVER_LIMITS)


def test_fed_bytes_are_accounted_before_they_are_kept() -> None:
    seen: list[int] = []

    def account(size: int) -> None:
        seen.append(size)
        if sum(seen) > 300_000:
            raise InvalidArchive("over budget", field="data")

    reader = ArchiveReader(SERVER_LIMITS, account=account)
    with pytest.raises(InvalidArchive, match="over budget"):
        for piece in hostile_archives.valid_archive(4 << 20):
            reader.feed(piece)
    assert max(seen) <= 256 * 1024


def test_a_long_entry_name_is_refused_without_being_echoed() -> None:
    name = "d/" + "n" * 4000 + ".md"
    for tar_format in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tar_format) as tar:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
        with pytest.raises(InvalidArchive) as caught:
            read_archive(buffer.getvalue(), SERVER_LIMITS)
        assert "4005 bytes" in caught.value.message and "nnnn" not in caught.value.message
