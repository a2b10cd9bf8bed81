"""The ledger port QuotaService keeps its counters in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from engram.domain.documents import SpaceUsage
from engram.domain.quotas import Counter


@dataclass(frozen=True, slots=True)
class ChargeOutcome:
    applied: bool
    # Counter values after the charge (or as they stand, for a replayed key).
    values: Mapping[str, int]


class UsageLedger(Protocol):
    async def apply(
        self, owner: str, counters: Sequence[Counter], delta: int, idempotency_key: str | None
    ) -> ChargeOutcome:
        """Atomically adds `delta` to every counter if none would pass its limit (growth),
        or subtracts it flooring at zero (shrink). A key already applied changes nothing;
        None is for a charge that is never replayed (an in-process call), and records none.
        Raises QuotaExceeded naming the first counter that would overflow."""
        ...

    async def read(self, keys: Sequence[str]) -> dict[str, int]:
        """Current values (0 for counters never charged)."""
        ...

    async def counters_of(self, owner: str) -> dict[str, int]:
        """Every counter belonging to a tenant ("instance" = global spaces)."""
        ...

    async def overwrite(self, owner: str, values: Mapping[str, int]) -> None:
        """Sets counters to exact values (Reconcile)."""
        ...

    async def get_override(self, owner: str) -> int | None: ...

    async def set_override(self, owner: str, quota_bytes: int) -> None: ...

    async def org_of(self, tenant: str) -> str | None:
        """The org the tenant belongs to (None: none)."""
        ...

    async def set_org(self, tenant: str, org: str | None) -> None:
        """Puts the tenant in `org` (None takes it out of its org)."""
        ...

    async def org_members(self, org: str) -> list[str]:
        """The org's tenants, sorted."""
        ...


class StoredUsage(Protocol):
    """What the documents actually hold: the truth Reconcile corrects counters to."""

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]: ...

    async def space_usage(self, space_id: str) -> SpaceUsage: ...
