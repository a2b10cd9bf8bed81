"""StorageService protobuf <-> domain conversions, in one place."""

from __future__ import annotations

from engram.domain.changes import ChangeKind, FeedItem, SpaceChange
from engram.domain.documents import DocumentVersion, SpaceSummary, StoredDocument
from engram.domain.positions import deletion_version
from engram.storage.service import (
    DirectoryItem,
    ImportOutcome,
    ImportResult,
    ImportStrategy,
    PurgeResult,
    SpaceDeletion,
    SpaceUsageReport,
    WriteMode,
    WriteResult,
)
from engram.v1 import document_pb2, position_pb2, storage_pb2
from engram.wire import space_to_proto, timestamp

WRITE_MODES = {
    storage_pb2.WRITE_MODE_UNSPECIFIED: WriteMode.REPLACE,
    storage_pb2.WRITE_MODE_REPLACE: WriteMode.REPLACE,
    storage_pb2.WRITE_MODE_APPEND: WriteMode.APPEND,
}
IMPORT_STRATEGIES = {
    storage_pb2.IMPORT_STRATEGY_SKIP: ImportStrategy.SKIP,
    storage_pb2.IMPORT_STRATEGY_OVERWRITE: ImportStrategy.OVERWRITE,
    storage_pb2.IMPORT_STRATEGY_RENAME: ImportStrategy.RENAME,
}
IMPORT_OUTCOMES = {
    ImportOutcome.CREATED: storage_pb2.IMPORT_OUTCOME_CREATED,
    ImportOutcome.OVERWRITTEN: storage_pb2.IMPORT_OUTCOME_OVERWRITTEN,
    ImportOutcome.SKIPPED: storage_pb2.IMPORT_OUTCOME_SKIPPED,
    ImportOutcome.RENAMED: storage_pb2.IMPORT_OUTCOME_RENAMED,
    ImportOutcome.UNCHANGED: storage_pb2.IMPORT_OUTCOME_UNCHANGED,
    ImportOutcome.UNSUPPORTED: storage_pb2.IMPORT_OUTCOME_UNSUPPORTED,
}


def document_to_proto(document: StoredDocument, *, with_content: bool) -> document_pb2.Document:
    return document_pb2.Document(
        space=space_to_proto(document.space),
        space_id=document.space_id,
        path=document.path,
        content=document.content if with_content else "",
        sha256=document.sha256,
        size_bytes=document.size_bytes,
        version=document.version,
        created_at=timestamp(document.created_at),
        updated_at=timestamp(document.updated_at),
        updated_by=document.updated_by,
        document_id=document.document_id,
        word_count=document.word_count,
    )


def write_response(result: WriteResult) -> storage_pb2.WriteDocumentResponse:
    return storage_pb2.WriteDocumentResponse(
        document=document_to_proto(result.document, with_content=False),
        created=result.created,
        bytes_delta=result.bytes_delta,
        position=position_of(result.document),
    )


def position_of(document: StoredDocument, *, deleted: bool = False) -> position_pb2.IndexPosition:
    """The index position a change left `document` in (read-your-writes searches); for a
    delete, one past the deleted version (`deletion_version`)."""
    return position_pb2.IndexPosition(
        space_id=document.space_id,
        path=document.path,
        document_id=document.document_id,
        version=deletion_version(document.version) if deleted else document.version,
    )


def entry_to_proto(item: DirectoryItem) -> storage_pb2.DirectoryEntry:
    entry = storage_pb2.DirectoryEntry(
        path=item.path, is_dir=item.is_dir, size_bytes=item.size_bytes
    )
    if item.updated_at is not None:
        entry.updated_at.CopyFrom(timestamp(item.updated_at))
    return entry


def version_to_proto(version: DocumentVersion) -> document_pb2.DocumentVersion:
    return document_pb2.DocumentVersion(
        document_id=version.document_id,
        version=version.version,
        sha256=version.sha256,
        size_bytes=version.size_bytes,
        updated_at=timestamp(version.updated_at),
        updated_by=version.updated_by,
        current=version.current,
        deleted=version.deleted,
    )


def usage_to_proto(report: SpaceUsageReport) -> storage_pb2.GetUsageResponse:
    return storage_pb2.GetUsageResponse(
        used_bytes=report.used_bytes,
        quota_bytes=report.quota_bytes,
        tenant_used_bytes=report.tenant_used_bytes,
        tenant_quota_bytes=report.tenant_quota_bytes,
        document_count=report.document_count,
    )


def import_response(result: ImportResult) -> storage_pb2.ImportSpaceResponse:
    return storage_pb2.ImportSpaceResponse(
        written=result.count(
            ImportOutcome.CREATED, ImportOutcome.OVERWRITTEN, ImportOutcome.RENAMED
        ),
        skipped=result.count(ImportOutcome.SKIPPED),
        renamed=result.count(ImportOutcome.RENAMED),
        bytes=result.bytes_written,
        entries=[
            storage_pb2.ImportedEntry(
                path=entry.path,
                stored_path=entry.stored_path,
                outcome=IMPORT_OUTCOMES[entry.outcome],
                detail=entry.detail,
            )
            for entry in result.entries
        ],
        unsupported=result.count(ImportOutcome.UNSUPPORTED),
    )


def purge_response(result: PurgeResult) -> storage_pb2.PurgeDocumentResponse:
    return storage_pb2.PurgeDocumentResponse(
        purged=result.purged,
        versions_erased=result.versions_erased,
        refunded_bytes=result.refunded_bytes,
    )


def delete_space_response(result: SpaceDeletion) -> storage_pb2.DeleteSpaceResponse:
    return storage_pb2.DeleteSpaceResponse(
        space_id=result.space_id,
        documents_erased=result.documents_erased,
        versions_erased=result.versions_erased,
        refunded_bytes=result.refunded_bytes,
    )


def space_summary_to_proto(summary: SpaceSummary) -> storage_pb2.SpaceSummary:
    return storage_pb2.SpaceSummary(
        space=space_to_proto(summary.space),
        space_id=summary.space_id,
        document_count=summary.document_count,
        used_bytes=summary.used_bytes,
        last_write_at=timestamp(summary.last_write_at),
    )


CHANGE_KINDS = {
    ChangeKind.WRITTEN: storage_pb2.CHANGE_KIND_WRITTEN,
    ChangeKind.DELETED: storage_pb2.CHANGE_KIND_DELETED,
    ChangeKind.PURGED: storage_pb2.CHANGE_KIND_PURGED,
    ChangeKind.SPACE_DELETED: storage_pb2.CHANGE_KIND_SPACE_DELETED,
}


def watch_response(item: FeedItem) -> storage_pb2.WatchSpaceResponse:
    if not isinstance(item, SpaceChange):
        return storage_pb2.WatchSpaceResponse(caught_up=True)
    return storage_pb2.WatchSpaceResponse(
        change=storage_pb2.SpaceChange(
            cursor=item.cursor,
            kind=CHANGE_KINDS[item.kind],
            path=item.path,
            version=item.version,
            sha256=item.sha256,
            size_bytes=item.size_bytes,
            at=timestamp(item.at),
            document_id=item.document_id,
            event_id=item.event_id,
        )
    )
