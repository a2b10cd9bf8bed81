"""A tenant's spaces: what list_spaces returns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from engram.client.mapping import optional_time, space_from_proto
from engram.client.models import Space

if TYPE_CHECKING:
    from engram.v1 import storage_pb2


@dataclass(frozen=True, slots=True)
class SpaceSummary:
    space: Space
    space_id: str
    document_count: int
    used_bytes: int
    last_write_at: datetime | None


def space_summary(message: storage_pb2.SpaceSummary) -> SpaceSummary:
    return SpaceSummary(
        space=space_from_proto(message.space),
        space_id=message.space_id,
        document_count=message.document_count,
        used_bytes=message.used_bytes,
        last_write_at=optional_time(message, "last_write_at"),
    )
