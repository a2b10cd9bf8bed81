"""Ports of the authz service: the token store and the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from engram.domain.ports import AuditRecord


@dataclass(frozen=True, slots=True)
class AuditEntry:
    event_id: str
    record: AuditRecord
    at: datetime
    # Opaque position for paging (after this entry).
    cursor: str


class AuditLog(Protocol):
    async def record(self, entry: AuditRecord) -> None: ...

    async def append(self, entry: AuditRecord, *, at: datetime) -> str:
        """Stores the entry; returns its event id."""
        ...

    async def list_since(self, since: datetime, *, after: str, limit: int) -> list[AuditEntry]:
        """Entries at or after `since`, oldest first, after the cursor `after` ('' = start)."""
        ...
