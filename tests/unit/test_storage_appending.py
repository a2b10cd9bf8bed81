"""How an append joins its document (storage decides it under the document's lock): as a
line of its own when asked, with a prefix when it creates the document."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.domain.documents import StoredDocument
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage.service import PLAIN_APPEND, Appending

AT = datetime(2026, 12, 1, tzinfo=UTC)
SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")


def doc(content: str) -> StoredDocument:
    return StoredDocument(
        space=SPACE,
        path="a.md",
        content=content,
        sha256="0" * 64,
        size_bytes=len(content),
        word_count=0,
        version=1,
        document_id="d",
        created_at=AT,
        updated_at=AT,
        updated_by="ann",
    )


def test_a_line_append_starts_on_a_line_of_its_own() -> None:
    line = Appending(as_line=True)
    assert line.joined(doc("x"), "a\n") == "\na\n"
    assert line.joined(doc("x\n"), "a\n") == "a\n"
    assert line.joined(doc(""), "a\n") == "a\n", "an empty document needs no newline"


def test_a_plain_append_adds_exactly_the_content() -> None:
    assert PLAIN_APPEND.joined(doc("x"), "a") == "a"
    assert PLAIN_APPEND.joined(None, "a") == "a"


def test_the_prefix_goes_only_before_a_created_document() -> None:
    headed = Appending(as_line=True, created_prefix="# Log\n\n")
    assert headed.joined(None, "a\n") == "# Log\n\na\n"
    assert headed.joined(doc("# Log\n\nx"), "a\n") == "\na\n"
