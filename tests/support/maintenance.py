"""MaintenanceDeps built from a running `engram dev` (EmbeddedEngram), for job tests.

Stands in for the composition root's own until the maintenance worker's wiring lands
(`engram dev` builds the same parts)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from engram.app.embedded import EmbeddedEngram
from engram.domain.principals import Principal, Role
from engram.indexer.outbox_feed import OutboxReindexQueue
from engram.maintenance.ports import MaintenanceDeps
from engram.storage.service import utc_now

# The maintenance worker's identity (domain.principals.MAINTENANCE once the worker lands).
MAINTENANCE = Principal(subject="engram-maintenance", tenant="", role=Role.ADMIN, service=True)


def maintenance_deps(
    engram: EmbeddedEngram, *, clock: Callable[[], datetime] = utc_now
) -> MaintenanceDeps:
    return MaintenanceDeps(
        storage=engram.storage,
        repository=engram.repository,
        quota=engram.quota,
        reindex=OutboxReindexQueue(engram.repository, engram.relay),
        keyword=engram.indexing.keyword,
        vector=engram.indexing.vector,
        principal=MAINTENANCE,
        clock=clock,
    )
