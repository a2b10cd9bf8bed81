"""The shapes of what the Mongo storage rooms record: revision ops and `_id`s."""

from __future__ import annotations

UPSERT = "upsert"
DELETE = "delete"
# A content-free tombstone: everything at or before it is erased (or being erased).
PURGE = "purge"
# Under the reserved path "": the whole space was erased up to this revision's time.
SPACE_DELETE = "space_delete"


def head_id(space_id: str, path: str) -> str:
    # Neither a space id nor a path may contain a newline.
    return f"{space_id}\n{path}"


def revision_id(space_id: str, path: str, rev: int) -> str:
    return f"{space_id}\n{path}\n{rev:012d}"


def trace_field(trace_context: tuple[tuple[str, str], ...]) -> dict[str, dict[str, str]]:
    """The revision's `trace` field (the write's trace context for its event), if any."""
    return {"trace": dict(trace_context)} if trace_context else {}
