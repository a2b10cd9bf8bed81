"""What erasing returns: purge_document and delete_space."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram.v1 import storage_pb2


@dataclass(frozen=True, slots=True)
class Purge:
    # False when nothing was stored at the path.
    purged: bool
    versions_erased: int
    refunded_bytes: int


@dataclass(frozen=True, slots=True)
class SpaceDeletion:
    space_id: str
    documents_erased: int
    versions_erased: int
    refunded_bytes: int


def purge(message: storage_pb2.PurgeDocumentResponse) -> Purge:
    return Purge(message.purged, message.versions_erased, message.refunded_bytes)


def space_deletion(message: storage_pb2.DeleteSpaceResponse) -> SpaceDeletion:
    return SpaceDeletion(
        space_id=message.space_id,
        documents_erased=message.documents_erased,
        versions_erased=message.versions_erased,
        refunded_bytes=message.refunded_bytes,
    )
