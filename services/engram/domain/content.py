"""Document content rules: UTF-8 text, a size cap, no credentials; and derived facts."""

from __future__ import annotations

import hashlib

from engram.domain.credentials import find_credential
from engram.domain.errors import ContentTooLarge, InvalidContent, SecretInContent

DEFAULT_MAX_DOC_BYTES = 2 * 1024 * 1024
# How much of the existing document is rescanned with an append, so that a credential
# split across the boundary is still recognised.
APPEND_SCAN_OVERLAP_CHARS = 256


def sha256_hex(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def word_count(content: str) -> int:
    return len(content.split())


def decode_utf8(data: bytes, *, what: str) -> str:
    """Decodes strict UTF-8; raises InvalidContent naming the byte offset otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidContent(
            f"{what} is not valid UTF-8 (bad byte at offset {error.start}); "
            "store Markdown text only",
            field="content",
        ) from None


def check_size(size_bytes: int, max_bytes: int, *, what: str = "content") -> None:
    """Refuses a document over the cap; a cap of 0 refuses every non-empty document."""
    if size_bytes > max_bytes:
        if max_bytes == 0:
            message = f"{what} is {size_bytes} bytes but this server stores no document content"
        else:
            message = (
                f"{what} would be {size_bytes} bytes; documents may be at most {max_bytes} "
                "bytes: split it into several documents"
            )
        raise ContentTooLarge(
            message,
            field="content",
            metadata={"size_bytes": str(size_bytes), "max_bytes": str(max_bytes)},
        )


def check_text(text: str, *, what: str = "content", first_line: int = 1) -> None:
    """Refuses NUL bytes and credential-shaped text, never echoing the credential."""
    if "\x00" in text:
        raise InvalidContent(
            f"{what} contains NUL characters; documents are Markdown text", field="content"
        )
    finding = find_credential(text, first_line=first_line)
    if finding is not None:
        raise SecretInContent(
            f"{what} looks like it contains {finding.label} (line {finding.line}); "
            "remove the credential and keep only a reference to where it is stored",
            field="content",
            metadata={"kind": finding.kind, "line": str(finding.line)},
        )


def check_append(existing: str, appended: str, *, what: str = "content") -> None:
    """Checks an append: the new text plus a little of the old, for boundary-split secrets."""
    tail = existing[-APPEND_SCAN_OVERLAP_CHARS:]
    first_line = 1 + existing.count("\n") - tail.count("\n")
    check_text(tail + appended, what=what, first_line=first_line)
