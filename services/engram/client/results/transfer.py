"""What import_space returns."""

from __future__ import annotations

from dataclasses import dataclass

from engram.v1 import storage_pb2

IMPORT_OUTCOMES = {
    storage_pb2.IMPORT_OUTCOME_CREATED: "created",
    storage_pb2.IMPORT_OUTCOME_OVERWRITTEN: "overwritten",
    storage_pb2.IMPORT_OUTCOME_SKIPPED: "skipped",
    storage_pb2.IMPORT_OUTCOME_RENAMED: "renamed",
    storage_pb2.IMPORT_OUTCOME_UNCHANGED: "unchanged",
    storage_pb2.IMPORT_OUTCOME_UNSUPPORTED: "unsupported",
}


@dataclass(frozen=True, slots=True)
class ImportedEntry:
    path: str
    # Where it was written ("" when skipped).
    stored_path: str
    # created, overwritten, skipped, renamed, unchanged or unsupported.
    outcome: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ImportResult:
    written: int
    skipped: int
    renamed: int
    bytes: int
    unsupported: int
    entries: tuple[ImportedEntry, ...]


def import_result(message: storage_pb2.ImportSpaceResponse) -> ImportResult:
    return ImportResult(
        written=message.written,
        skipped=message.skipped,
        renamed=message.renamed,
        bytes=message.bytes,
        unsupported=message.unsupported,
        entries=tuple(
            ImportedEntry(
                path=entry.path,
                stored_path=entry.stored_path,
                outcome=IMPORT_OUTCOMES.get(entry.outcome, "unspecified"),
                detail=entry.detail,
            )
            for entry in message.entries
        ),
    )
