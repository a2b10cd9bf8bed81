"""What a space holds: StorageService's usage report and its upkeep's stored usage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engram.v1 import storage_pb2


@dataclass(frozen=True, slots=True)
class Usage:
    used_bytes: int
    # The space's sub-cap (0 = none).
    quota_bytes: int
    tenant_used_bytes: int
    tenant_quota_bytes: int
    document_count: int


@dataclass(frozen=True, slots=True)
class StoredUsage:
    """What a space's live documents hold (no quota counter involved)."""

    used_bytes: int
    document_count: int


def usage(message: storage_pb2.GetUsageResponse) -> Usage:
    return Usage(
        used_bytes=message.used_bytes,
        quota_bytes=message.quota_bytes,
        tenant_used_bytes=message.tenant_used_bytes,
        tenant_quota_bytes=message.tenant_quota_bytes,
        document_count=message.document_count,
    )


def stored_usage(message: storage_pb2.GetStoredUsageResponse) -> StoredUsage:
    return StoredUsage(message.used_bytes, message.document_count)
