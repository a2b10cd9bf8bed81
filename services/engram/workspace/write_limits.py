"""Rate limits on workspace writes, per agent (principal + space), shared by every replica.

Two sliding windows, a minute and an hour: no 60-second span ever holds more than
`per_minute` admitted writes of one agent, and no 3600-second span more than `per_hour`,
wherever the span starts (fixed clock windows let twice the limit through across a boundary).
Each admitted write is an entry in the agent's log in the same RateLimitStore as the
expensive-RPC limits (SQLite embedded, MongoDB in production; an entry is claimed by a unique
insert, so racing replicas never admit past a limit). A refusal's RetryInfo is the true wait:
until the oldest of the window's writes leaves it.

Both windows are checked before either records the write: a write the minute window refuses
never uses an hour entry, so a burst of refused writes cannot eat the hour's budget. On SQLite
the check and both entries are one transaction; on MongoDB a write the hour window refuses
only because a racing replica took its last entry keeps its minute entry, which only ever
admits less. The limit belongs to the tool surface: it applies to every principal, admins
included.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from engram.domain.errors import RateLimited
from engram.domain.principals import Principal
from engram.runtime.rate_limit import RateLimitStore

MINUTE = 60
HOUR = 3600


@dataclass(frozen=True, slots=True)
class WriteLimits:
    # Writes per agent per window; 0 = no limit.
    per_minute: int = 20
    per_hour: int = 200


class WorkspaceWriteLimiter:
    def __init__(
        self,
        store: RateLimitStore,
        limits: WriteLimits,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits = limits
        self._clock = clock

    async def check(self, principal: Principal, space_id: str) -> None:
        """Records one write of `principal` in `space_id`; raises RateLimited past a limit."""
        agent = f"workspace-write/{principal.tenant}/{principal.subject}/{space_id}"
        windows = [
            (limit, seconds, unit, setting)
            for limit, seconds, unit, setting in (
                (self._limits.per_minute, MINUTE, "minute", "ENGRAM_WORKSPACE_WRITES_PER_MINUTE"),
                (self._limits.per_hour, HOUR, "hour", "ENGRAM_WORKSPACE_WRITES_PER_HOUR"),
            )
            if limit > 0
        ]
        if not windows:
            return
        refused = await self._store.admit(
            [(f"{agent}/{unit}", limit, seconds) for limit, seconds, unit, _ in windows],
            self._clock(),
        )
        if refused is None:
            return
        index, wait = refused
        limit, _, unit, setting = windows[index]
        # RetryInfo carries the wait to the millisecond, rounded up: a retry after it is
        # admitted (unless other writes took the room meanwhile).
        wait = math.ceil(wait * 1000) / 1000
        raise RateLimited(
            f"workspace writes are limited to {limit} per {unit} per agent ({setting}); "
            f"retry in {math.ceil(wait)} s",
            metadata={"limit": str(limit), "window": unit},
            retry_after_seconds=wait,
        )
