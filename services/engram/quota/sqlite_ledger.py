"""SqliteUsageLedger: counters, overrides (org ceilings among them), org memberships and
applied idempotency keys in the embedded file.

A charge is one writer transaction, so checking every limit and applying the delta to every
counter is atomic: two concurrent charges can never together pass a limit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence

from engram.backends.sqlite import SqliteDatabase
from engram.domain.quotas import Counter, apply_delta, check_growth
from engram.quota.ports import ChargeOutcome

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_counters (
    key        TEXT    PRIMARY KEY,
    owner      TEXT    NOT NULL,
    used_bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_counters_by_owner ON usage_counters (owner);
CREATE TABLE IF NOT EXISTS quota_overrides (
    owner       TEXT    PRIMARY KEY,
    quota_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS org_members (
    tenant TEXT PRIMARY KEY,
    org    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS org_members_by_org ON org_members (org);
CREATE TABLE IF NOT EXISTS charge_keys (
    key   TEXT    PRIMARY KEY,
    at_us INTEGER NOT NULL
);
"""

# Applied idempotency keys are kept this long: far beyond any client's retry window.
KEY_RETENTION_SECONDS = 24 * 3600
PRUNE_EVERY = 1000


class SqliteUsageLedger:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database
        self._applies = 0

    async def apply(
        self, owner: str, counters: Sequence[Counter], delta: int, idempotency_key: str | None
    ) -> ChargeOutcome:
        self._applies += 1
        prune = self._applies % PRUNE_EVERY == 0

        def work(connection: sqlite3.Connection) -> ChargeOutcome:
            now_us = int(time.time() * 1_000_000)
            if prune:
                connection.execute(
                    "DELETE FROM charge_keys WHERE at_us < ?",
                    (now_us - KEY_RETENTION_SECONDS * 1_000_000,),
                )
            current = _read(connection, [c.key for c in counters])
            if (
                idempotency_key is not None
                and connection.execute(
                    "SELECT 1 FROM charge_keys WHERE key = ?", (idempotency_key,)
                ).fetchone()
            ):
                return ChargeOutcome(applied=False, values=current)
            for counter in counters:
                check_growth(counter, current[counter.key], delta)
            values = {c.key: apply_delta(current[c.key], delta) for c in counters}
            connection.executemany(
                "INSERT INTO usage_counters (key, owner, used_bytes) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET used_bytes = excluded.used_bytes",
                [(key, owner, value) for key, value in values.items()],
            )
            if idempotency_key is not None:
                connection.execute(
                    "INSERT INTO charge_keys (key, at_us) VALUES (?, ?)", (idempotency_key, now_us)
                )
            return ChargeOutcome(applied=True, values=values)

        return await self._db.write(work)

    async def read(self, keys: Sequence[str]) -> dict[str, int]:
        return await self._db.read(lambda connection: _read(connection, keys))

    async def counters_of(self, owner: str) -> dict[str, int]:
        def work(connection: sqlite3.Connection) -> dict[str, int]:
            rows = connection.execute(
                "SELECT key, used_bytes FROM usage_counters WHERE owner = ?", (owner,)
            ).fetchall()
            return {str(key): int(used) for key, used in rows}

        return await self._db.read(work)

    async def overwrite(self, owner: str, values: Mapping[str, int]) -> None:
        def work(connection: sqlite3.Connection) -> None:
            connection.executemany(
                "INSERT INTO usage_counters (key, owner, used_bytes) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET used_bytes = excluded.used_bytes",
                [(key, owner, value) for key, value in values.items()],
            )

        await self._db.write(work)

    async def get_override(self, owner: str) -> int | None:
        def work(connection: sqlite3.Connection) -> int | None:
            row = connection.execute(
                "SELECT quota_bytes FROM quota_overrides WHERE owner = ?", (owner,)
            ).fetchone()
            return int(row[0]) if row else None

        return await self._db.read(work)

    async def set_override(self, owner: str, quota_bytes: int) -> None:
        def work(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO quota_overrides (owner, quota_bytes) VALUES (?, ?) "
                "ON CONFLICT (owner) DO UPDATE SET quota_bytes = excluded.quota_bytes",
                (owner, quota_bytes),
            )

        await self._db.write(work)

    async def org_of(self, tenant: str) -> str | None:
        def work(connection: sqlite3.Connection) -> str | None:
            row = connection.execute(
                "SELECT org FROM org_members WHERE tenant = ?", (tenant,)
            ).fetchone()
            return str(row[0]) if row else None

        return await self._db.read(work)

    async def set_org(self, tenant: str, org: str | None) -> None:
        def work(connection: sqlite3.Connection) -> None:
            if org is None:
                connection.execute("DELETE FROM org_members WHERE tenant = ?", (tenant,))
                return
            connection.execute(
                "INSERT INTO org_members (tenant, org) VALUES (?, ?) "
                "ON CONFLICT (tenant) DO UPDATE SET org = excluded.org",
                (tenant, org),
            )

        await self._db.write(work)

    async def org_members(self, org: str) -> list[str]:
        def work(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute(
                "SELECT tenant FROM org_members WHERE org = ? ORDER BY tenant", (org,)
            ).fetchall()
            return [str(row[0]) for row in rows]

        return await self._db.read(work)


def _read(connection: sqlite3.Connection, keys: Sequence[str]) -> dict[str, int]:
    values = dict.fromkeys(keys, 0)
    marks = ",".join("?" * len(keys))
    for key, used in connection.execute(
        f"SELECT key, used_bytes FROM usage_counters WHERE key IN ({marks})", tuple(keys)
    ):
        values[str(key)] = int(used)
    return values
