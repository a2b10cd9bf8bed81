"""Rate limits on workspace writes, per agent (principal + space), shared by every replica.

Two fixed windows, a minute and an hour, counted in the same RateLimitStore as the
expensive-RPC limits (SQLite embedded, MongoDB in production; atomic, no lost increments).
The limit belongs to the tool surface: it applies to every principal, admins included.

Both windows are counted in one store call, the minute first: a write the minute window
refuses never uses an hour slot, so a burst of refused writes cannot eat the hour's budget.
On SQLite the call is one transaction (a write refused by either window counts in neither);
on MongoDB a write the hour window refuses has used a minute slot, which costs nothing:
minute windows lie inside hour windows (3600 is a multiple of 60), so that minute ends
before the hour window admits anything again.
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
        """Counts one write of `principal` in `space_id`; raises RateLimited past a limit."""
        now = self._clock()
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
        refused = await self._store.hit_all(
            [(f"{agent}/{unit}", int(now // seconds), limit) for limit, seconds, unit, _ in windows]
        )
        if refused is None:
            return
        limit, seconds, unit, setting = windows[refused]
        window = int(now // seconds)
        retry = max(1, math.ceil((window + 1) * seconds - now))
        raise RateLimited(
            f"workspace writes are limited to {limit} per {unit} per agent ({setting}); "
            f"retry in {retry} s",
            metadata={"limit": str(limit), "window": unit},
            retry_after_seconds=retry,
        )
