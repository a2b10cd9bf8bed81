"""Space archives: gzipped tars of Markdown documents, written incrementally and read whole.

Reading validates every entry like a write (path, UTF-8, size, credentials) and refuses the
whole archive on the first bad entry, naming it. Both directions are CPU work: callers run
them off the event loop.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from datetime import datetime

from engram.domain.content import check_size, check_text, decode_utf8
from engram.domain.errors import InvalidArchive, InvalidArgument
from engram.domain.paths import validate_document_path


@dataclass(frozen=True, slots=True)
class ArchiveEntry:
    path: str
    content: str


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


def read_archive(
    data: bytes, *, max_entries: int, max_doc_bytes: int, max_total_bytes: int
) -> list[ArchiveEntry]:
    """Every document in the archive, validated; raises on the first bad entry."""
    entries: list[ArchiveEntry] = []
    seen: set[str] = set()
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                name = member.name
                if member.isdir():
                    continue
                if not member.isfile():
                    raise InvalidArchive(
                        f"archive entry {name!r} is not a regular file (links and devices are "
                        "refused); nothing was imported",
                        field="data",
                        metadata={"entry": name},
                    )
                if len(entries) >= max_entries:
                    raise InvalidArchive(
                        f"archive has more than {max_entries} documents; split it",
                        field="data",
                    )
                path = _archive_path(name)
                try:
                    validate_document_path(path, field="data")
                    check_size(member.size, max_doc_bytes, what=f"document {path!r}")
                except InvalidArgument as error:
                    raise _entry_error(name, error) from None
                total += member.size
                if total > max_total_bytes:
                    raise InvalidArchive(
                        f"archive holds more than {max_total_bytes} bytes of documents; split it",
                        field="data",
                    )
                if path in seen:
                    raise InvalidArchive(
                        f"archive has two entries for {path!r}; nothing was imported",
                        field="data",
                        metadata={"entry": name},
                    )
                seen.add(path)
                extracted = tar.extractfile(member)
                assert extracted is not None  # regular files always extract
                try:
                    content = decode_utf8(extracted.read(), what=f"document {path!r}")
                    check_text(content, what=f"document {path!r}")
                except InvalidArgument as error:
                    raise _entry_error(name, error) from None
                entries.append(ArchiveEntry(path=path, content=content))
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise InvalidArchive(
            f"data is not a readable .tar.gz archive ({type(error).__name__}: {error})",
            field="data",
        ) from None
    return entries
