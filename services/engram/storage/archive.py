"""Space archives: gzipped tars of Markdown documents, written and read incrementally.

Reading validates every entry like a write (path, UTF-8, size, credentials) and refuses the
whole archive on the first bad entry, naming it, bounded in time and memory whatever the
bytes (see `ArchiveReader`). With `skip_unsupported`, entries engram cannot store at all
(non-Markdown names, links, another agent runtime's BOOTSTRAP.md and HEARTBEAT.md) are
left out and reported instead; a bad Markdown entry still refuses the archive. Both
directions are CPU work: callers run them off the event loop, a bounded piece at a time.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from engram.domain.content import check_size, check_text, decode_utf8
from engram.domain.errors import InvalidArchive, InvalidArgument
from engram.domain.paths import MARKDOWN_SUFFIX, MAX_PATH_BYTES, validate_document_path
from engram.domain.workspace import BOOTSTRAP_PATH, HEARTBEAT_PATH


@dataclass(frozen=True, slots=True)
class ArchiveEntry:
    path: str
    content: str
    # Why the entry is left out (skip_unsupported); empty for a document to store.
    unsupported: str = ""


class _Sink(io.RawIOBase):
    """Collects what tarfile writes so it can be streamed out in chunks."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


class ArchiveWriter:
    """Builds a .tar.gz one document at a time; `add` and `close` return the bytes produced."""

    def __init__(self) -> None:
        self._sink = _Sink()
        self._tar = tarfile.open(fileobj=self._sink, mode="w|gz", format=tarfile.PAX_FORMAT)

    def add(self, path: str, content: str, modified: datetime) -> bytes:
        data = content.encode("utf-8")
        info = tarfile.TarInfo(name=path)
        info.size = len(data)
        info.mtime = int(modified.timestamp())
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))
        return self._sink.drain()

    def close(self) -> bytes:
        self._tar.close()
        return self._sink.drain()


def _entry_error(name: str, error: InvalidArgument) -> InvalidArgument:
    renamed = type(error)(
        f"archive entry {name!r}: {error.message}; nothing was imported",
        field="data",
        metadata={**error.metadata, "entry": name},
    )
    return renamed


def _archive_path(name: str) -> str:
    # Tools such as `tar -C dir .` prefix every entry with "./": accept exactly that prefix.
    return name[2:] if name.startswith("./") else name


# --- reading: a bounded, streaming tar.gz reader ----------------------------------------------
#
# `tarfile` is never shown an uploaded byte: it reads whole pax/GNU metadata headers into
# memory and (before CPython 3.11.10) runs a quadratic regex over pax records (CVE-2024-6232).
# `ArchiveReader` decompresses in bounded steps, counting the uncompressed bytes as they come,
# and walks the 512-byte tar blocks itself: metadata headers are capped at a few KiB and parsed
# linearly, documents are capped by their declared size before a byte of them is kept.

BLOCK = 512
# Output of one decompression step: a step never holds more than this much new data.
INFLATE_STEP = 256 * 1024
# pax extended headers and GNU long names/links above this are refused before being read.
MAX_METADATA_BYTES = 8 * 1024
# Metadata headers in a row before a member (pax + GNU long name + long link is 3).
MAX_METADATA_RUN = 4
MAX_PAX_LENGTH_DIGITS = 8
# ustar type flags: regular files, directories, and the metadata headers read here.
REGULAR_TYPES = frozenset({b"0", b"\x00", b"7"})
DIRECTORY_TYPE = b"5"
PAX_TYPE = b"x"
PAX_GLOBAL_TYPE = b"g"
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"
METADATA_TYPES = frozenset({PAX_TYPE, PAX_GLOBAL_TYPE, GNU_LONGNAME, GNU_LONGLINK})
LINK_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a device",
    b"4": "a device",
    b"6": "a FIFO",
}


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    max_entries: int
    max_doc_bytes: int
    # Uncompressed bytes of the whole tar stream, counted as they are decompressed.
    max_bytes: int


def _refuse(message: str, **metadata: str) -> InvalidArchive:
    return InvalidArchive(f"{message}; nothing was imported", field="data", metadata=metadata)


def _octal(field: bytes, what: str) -> int:
    """A numeric ustar field: NUL/space-padded octal, or GNU base-256 (first byte 0x80)."""
    if field and field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(0x30 <= c <= 0x37 for c in text):
        raise _refuse(f"a tar header has a malformed {what} field")
    return int(text, 8)


def _text(field: bytes) -> bytes:
    return field.split(b"\x00", 1)[0]


_HIGH_BYTES = bytes(range(128, 256))


def _checksum_ok(header: bytes) -> bool:
    stored = _octal(header[148:156], "checksum")
    blanked = header[:148] + b" " * 8 + header[156:]
    unsigned = sum(blanked)
    # Some old tars sum signed bytes: each byte above 127 counts 256 less.
    high = len(blanked) - len(blanked.translate(None, _HIGH_BYTES))
    return stored in (unsigned, unsigned - 256 * high)


def parse_pax(data: bytes) -> dict[str, str]:
    """pax records `<len> <key>=<value>\\n`, parsed in one linear pass (no regex)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        if data[position] == 0:  # NUL padding after the last record
            break
        space = data.find(b" ", position, position + MAX_PAX_LENGTH_DIGITS + 1)
        digits = data[position:space] if space > position else b""
        if not digits or not digits.isdigit():
            raise _refuse("a pax header record has no valid length")
        length = int(digits)
        end = position + length
        if length <= len(digits) + 1 or end > len(data) or data[end - 1 : end] != b"\n":
            raise _refuse("a pax header record has a wrong length")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise _refuse("a pax header record has no '='")
        try:
            records[key.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse("a pax header record is not UTF-8") from None
        position = end
    return records


@dataclass(slots=True)
class _Member:
    name: str
    size: int
    kind: bytes
    # Data read past, never kept (an unsupported entry).
    skip: bool = False


class ArchiveReader:
    """Reads a .tar.gz pushed to it in pieces; `feed` and `finish` raise InvalidArchive or
    the entry's InvalidArgument on the first problem, whatever the bytes.

    Memory stays within the documents kept (at most `max_bytes`) plus one decompression step;
    each `feed` does work proportional to the bytes it is given.
    """

    def __init__(
        self,
        limits: ArchiveLimits,
        *,
        account: Callable[[int], None] | None = None,
        skip_unsupported: bool = False,
    ) -> None:
        self._limits = limits
        # Leave out (and report) what cannot be stored instead of refusing the archive.
        self._skip_unsupported = skip_unsupported
        # Told the size of every decompressed step before it is kept (it may raise).
        self._account = account
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = bytearray()  # decompressed bytes not yet parsed (< one step + a block)
        self._uncompressed = 0
        self._members = 0
        self._entries: list[ArchiveEntry] = []
        self._seen: set[str] = set()
        self._member: _Member | None = None  # whose data is being read
        self._data = bytearray()
        self._remaining = 0  # bytes of the current member's data (plus padding) to read
        self._padding = 0
        self._pax: dict[str, str] = {}
        self._long_name: str | None = None
        self._metadata_run = 0
        self._ended = False
        self._gzip_done = False

    @property
    def uncompressed_bytes(self) -> int:
        return self._uncompressed

    def discard(self) -> None:
        """Drops everything read so far (entries, unparsed bytes, the inflate state); the
        reader keeps nothing it is fed after this, and `finish` refuses."""
        self._entries = []
        self._seen = set()
        self._pending = bytearray()
        self._data = bytearray()
        self._member = None
        self._pax, self._long_name = {}, None
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._ended = True
        self._gzip_done = False

    def feed(self, data: bytes) -> None:
        """Decompresses and parses `data` in bounded steps."""
        view = memoryview(data)
        while view:
            if self._gzip_done:
                # A further gzip member (concatenated .gz files are one stream).
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._gzip_done = False
            try:
                out = self._inflater.decompress(view, INFLATE_STEP)
            except zlib.error as error:
                raise InvalidArchive(
                    f"data is not a readable .tar.gz archive (gzip: {error})", field="data"
                ) from None
            view = memoryview(self._inflater.unconsumed_tail or self._inflater.unused_data)
            if self._inflater.eof:
                self._gzip_done = True
            self._take(out)

    def finish(self) -> list[ArchiveEntry]:
        """Every document, once the whole upload was fed; refuses a truncated archive."""
        if not self._gzip_done:
            raise InvalidArchive(
                "data is not a readable .tar.gz archive (the gzip stream is truncated)",
                field="data",
            )
        if not self._ended:
            if not (self._member is None and not self._pending and self._members):
                raise InvalidArchive(
                    "data is not a readable .tar.gz archive (the tar stream is truncated)",
                    field="data",
                )
            # Otherwise complete: tar end-of-archive blocks are optional in practice.
        if self._skip_unsupported:
            return leave_out_foreign_workspace_files(self._entries)
        return self._entries

    # --- parsing -----------------------------------------------------------------------------

    def _take(self, out: bytes) -> None:
        if not out:
            return
        self._uncompressed += len(out)
        if self._uncompressed > self._limits.max_bytes:
            raise InvalidArchive(
                f"archive expands to more than {self._limits.max_bytes} bytes "
                "(ENGRAM_MAX_IMPORT_BYTES); split it",
                field="data",
            )
        if self._ended:
            return  # padding after the end-of-archive blocks: counted, not parsed
        if self._account is not None:
            self._account(len(out))
        self._pending += out
        position = 0
        pending = self._pending
        while not self._ended:
            if self._remaining:
                step = min(self._remaining, len(pending) - position)
                if step == 0:
                    break
                keep = min(step, max(0, self._remaining - self._padding))
                if keep and not (self._member is not None and self._member.skip):
                    self._data += pending[position : position + keep]
                self._remaining -= step
                position += step
                if self._remaining == 0:
                    self._member_done()
                continue
            if len(pending) - position < BLOCK:
                break
            self._header(bytes(pending[position : position + BLOCK]))
            position += BLOCK
        del pending[:position]
        if self._ended:
            pending.clear()

    def _header(self, header: bytes) -> None:
        if header.count(0) == BLOCK:
            # End of archive (like tarfile, the first zero block ends it; what follows is
            # padding, still counted against the size limit).
            self._ended = True
            return
        if not _checksum_ok(header):
            raise InvalidArchive(
                "data is not a readable .tar.gz archive (a tar header checksum is wrong)",
                field="data",
            )
        kind = header[156:157]
        size = _octal(header[124:136], "size")
        if kind in METADATA_TYPES:
            self._metadata_run += 1
            if self._metadata_run > MAX_METADATA_RUN:
                raise _refuse("the archive has a run of tar metadata headers with no entry")
            if size > MAX_METADATA_BYTES:
                what = "pax header" if kind in (PAX_TYPE, PAX_GLOBAL_TYPE) else "GNU long name"
                raise _refuse(
                    f"a {what} of {size} bytes is over the {MAX_METADATA_BYTES}-byte limit"
                )
            self._start(_Member(name="", size=size, kind=kind))
            return
        self._metadata_run = 0
        self._members += 1
        if self._members > self._limits.max_entries:
            raise _refuse(
                f"the archive has more than {self._limits.max_entries} entries "
                "(ENGRAM_MAX_IMPORT_ENTRIES); split it"
            )
        name = self._member_name(header)
        if len(name.encode("utf-8")) > MAX_PATH_BYTES + 2:  # "./" + the longest path
            # Refused without echoing it: error messages never carry kilobytes of upload.
            raise _refuse(
                f"an archive entry name is {len(name.encode('utf-8'))} bytes; document paths "
                f"are at most {MAX_PATH_BYTES}"
            )
        self._pax, self._long_name = {}, None
        if kind == DIRECTORY_TYPE:
            self._skip_data(size)
            return
        path = _archive_path(name)
        if kind not in REGULAR_TYPES:
            what = LINK_TYPES.get(kind, f"of unknown type {kind!r} (sparse and vendor types)")
            # Links, devices and FIFOs are a header and (normally no) data: read past. Vendor
            # types (GNU sparse and others) may carry blocks their size does not count: refused.
            if self._skip_unsupported and kind in LINK_TYPES:
                self._leave_out(path, size, kind, f"{what}, not a regular file")
                return
            raise _refuse(f"archive entry {name!r} is {what}, not a regular file", entry=name)
        if self._skip_unsupported and not is_markdown_name(path):
            self._leave_out(
                path, size, kind, f"not a Markdown file (engram stores {MARKDOWN_SUFFIX})"
            )
            return
        try:
            validate_document_path(path, field="data")
            check_size(size, self._limits.max_doc_bytes, what=f"document {path!r}")
        except InvalidArgument as error:
            raise _entry_error(name, error) from None
        if path in self._seen:
            raise _refuse(f"archive has two entries for {path!r}", entry=name)
        self._seen.add(path)
        self._start(_Member(name=name, size=size, kind=kind))

    def _member_name(self, header: bytes) -> str:
        size = self._pax.get("size")
        if size is not None:
            raise _refuse("pax 'size' records are not accepted; use the header's size field")
        if any(key.startswith("GNU.sparse") for key in self._pax):
            raise _refuse("sparse archive entries are refused")
        raw = self._pax.get("path") or self._long_name
        if raw is not None:
            return raw
        name = _text(header[0:100])
        if header[257:265] == b"ustar\x0000":
            prefix = _text(header[345:500])
            if prefix:
                name = prefix + b"/" + name
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse("an archive entry name is not UTF-8") from None

    def _leave_out(self, path: str, size: int, kind: bytes, reason: str) -> None:
        """Reports the entry as unsupported and reads past its data without keeping it."""
        self._entries.append(ArchiveEntry(path=path, content="", unsupported=reason))
        self._start(_Member(name=path, size=size, kind=kind, skip=True))

    def _start(self, member: _Member) -> None:
        padded = -(-member.size // BLOCK) * BLOCK
        self._member = member
        self._data = bytearray()
        self._remaining = padded
        self._padding = padded - member.size
        if padded == 0:
            self._member_done()

    def _skip_data(self, size: int) -> None:
        if size:
            raise _refuse("a directory entry carries data")

    def _member_done(self) -> None:
        member, data = self._member, bytes(self._data)
        assert member is not None
        self._member, self._data = None, bytearray()
        if member.skip:
            return
        if member.kind == PAX_TYPE:
            self._pax = parse_pax(data)
        elif member.kind == PAX_GLOBAL_TYPE:
            parse_pax(data)  # validated, then ignored: it only carries defaults we do not use
        elif member.kind == GNU_LONGNAME:
            try:
                self._long_name = _text(data).decode("utf-8")
            except UnicodeDecodeError:
                raise _refuse("a GNU long name is not UTF-8") from None
        elif member.kind == GNU_LONGLINK:
            pass  # only links carry one, and links are refused with their header
        else:
            path = _archive_path(member.name)
            try:
                content = decode_utf8(data, what=f"document {path!r}")
                check_text(content, what=f"document {path!r}")
            except InvalidArgument as error:
                raise _entry_error(member.name, error) from None
            self._entries.append(ArchiveEntry(path=path, content=content))


def is_markdown_name(path: str) -> bool:
    """True when the entry's file name ends in `.md` (and is more than that)."""
    leaf = path.rpartition("/")[2]
    return leaf.endswith(MARKDOWN_SUFFIX) and leaf != MARKDOWN_SUFFIX


# Files at the root of an OpenClaw (or Minara) agent workspace; any one of them marks one.
WORKSPACE_MARKERS = frozenset({"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md"})
# Root files such a workspace holds that mean something else to engram.
FOREIGN_RUNTIME_FILES = {
    BOOTSTRAP_PATH: (
        "another agent runtime's first-run ritual: here it would put the agent back into "
        "onboarding (engram seeds its own BOOTSTRAP.md)"
    ),
    HEARTBEAT_PATH: (
        "another agent runtime's heartbeat checklist: engram's HEARTBEAT.md is the agent's "
        "rendered status (memory_write target heartbeat)"
    ),
}


def leave_out_foreign_workspace_files(entries: list[ArchiveEntry]) -> list[ArchiveEntry]:
    """In an OpenClaw/Minara workspace archive, marks its root BOOTSTRAP.md and
    HEARTBEAT.md unsupported; any other archive is returned as it is."""
    stored = {entry.path for entry in entries if not entry.unsupported}
    if not stored & WORKSPACE_MARKERS:
        return entries
    return [
        ArchiveEntry(entry.path, "", FOREIGN_RUNTIME_FILES[entry.path])
        if entry.path in FOREIGN_RUNTIME_FILES and not entry.unsupported
        else entry
        for entry in entries
    ]


def read_archive(
    data: bytes, limits: ArchiveLimits, *, skip_unsupported: bool = False
) -> list[ArchiveEntry]:
    """Every entry of a whole archive, validated; raises on the first bad entry (with
    skip_unsupported, what cannot be stored comes back marked `unsupported` instead)."""
    reader = ArchiveReader(limits, skip_unsupported=skip_unsupported)
    for start in range(0, len(data), INFLATE_STEP):
        reader.feed(data[start : start + INFLATE_STEP])
    return reader.finish()
