"""Archives: written incrementally, read whole, refused whole on the first bad entry."""

from __future__ import annotations

import io
import tarfile
from datetime import UTC, datetime

import pytest

from engram.domain.errors import (
    ContentTooLarge,
    InvalidArchive,
    InvalidContent,
    InvalidPath,
    SecretInContent,
)
from engram.storage.archive import ArchiveWriter, read_archive

pytestmark = pytest.mark.unit

LIMITS = {"max_entries": 100, "max_doc_bytes": 1024, "max_total_bytes": 10_000}


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
    entries = read_archive(data, **LIMITS)
    assert [(e.path, e.content) for e in entries] == [("MEMORY.md", "# hi\n"), ("d/x.md", "é")]


def test_leading_dot_slash_is_accepted() -> None:
    entries = read_archive(make_tar([("./MEMORY.md", b"x")]), **LIMITS)
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
        read_archive(make_tar(entries), **LIMITS)
    assert fragment in str(caught.value)
    assert "nothing was imported" in str(caught.value) or "two entries" in str(caught.value)


def test_links_are_refused() -> None:
    with pytest.raises(InvalidArchive, match="not a regular file"):
        read_archive(make_tar([("link.md", b"")], kind=tarfile.SYMTYPE), **LIMITS)


def test_not_a_tarball_is_refused_cleanly() -> None:
    with pytest.raises(InvalidArchive, match="not a readable"):
        read_archive(b"definitely not gzip", **LIMITS)


def test_total_and_count_limits() -> None:
    many = [(f"f{i}.md", b"x") for i in range(101)]
    with pytest.raises(InvalidArchive, match="more than 100 documents"):
        read_archive(make_tar(many), **LIMITS)
    heavy = [(f"f{i}.md", b"x" * 1000) for i in range(11)]
    with pytest.raises(InvalidArchive, match="more than 10000 bytes"):
        read_archive(make_tar(heavy), **LIMITS)
