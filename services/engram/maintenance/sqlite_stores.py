"""The worker's stores in the embedded SQLite database (`engram dev`): every write is one
transaction on the single writer thread, so a lease is taken by one conditional upsert."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.maintenance import JobOutcome, JobRun, SpaceSettings
from engram.domain.maintenance_rules import LastRuns
from engram.maintenance.ports import Lease, utc_now
from engram.maintenance.records import (
    run_from_dict,
    run_to_dict,
    settings_from_dict,
    settings_json,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS maintenance_leases (
    key        TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS maintenance_runs (
    run_id      TEXT PRIMARY KEY,
    job         TEXT NOT NULL,
    space_id    TEXT NOT NULL,
    started_us  INTEGER NOT NULL,
    finished_us INTEGER,
    outcome     TEXT NOT NULL,
    worker      TEXT NOT NULL,
    on_demand   INTEGER NOT NULL,
    counts      TEXT NOT NULL,
    message     TEXT NOT NULL,
    details     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS maintenance_runs_newest ON maintenance_runs (started_us, run_id);
CREATE INDEX IF NOT EXISTS maintenance_runs_space
    ON maintenance_runs (space_id, started_us, run_id);
CREATE INDEX IF NOT EXISTS maintenance_runs_running ON maintenance_runs (job, space_id, outcome);
CREATE TABLE IF NOT EXISTS maintenance_last (
    job          TEXT NOT NULL,
    space_id     TEXT NOT NULL,
    succeeded_us INTEGER,
    failed_us    INTEGER,
    PRIMARY KEY (space_id, job)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS space_maintenance (
    space_id TEXT PRIMARY KEY,
    settings TEXT NOT NULL
) WITHOUT ROWID;
"""

_RUN_COLUMNS = (
    "run_id, job, space_id, started_us, finished_us, outcome, worker, on_demand, counts, "
    "message, details"
)


class SqliteLeaseStore:
    def __init__(
        self, database: SqliteDatabase, *, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self._db = database
        self._clock = clock

    async def acquire(self, key: str, holder: str, ttl: timedelta) -> Lease | None:
        now = self._clock()
        expires = now + ttl

        def take(connection: sqlite3.Connection) -> bool:
            row = connection.execute(
                "INSERT INTO maintenance_leases (key, holder, expires_us) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, "
                "expires_us = excluded.expires_us "
                "WHERE maintenance_leases.expires_us <= ? "
                "OR maintenance_leases.holder = excluded.holder RETURNING holder",
                (key, holder, to_micros(expires), to_micros(now)),
            ).fetchone()
            return row is not None

        taken = await self._db.write(take)
        return Lease(key, holder, expires) if taken else None

    async def renew(self, lease: Lease, ttl: timedelta) -> Lease | None:
        expires = self._clock() + ttl

        def extend(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE maintenance_leases SET expires_us = ? WHERE key = ? AND holder = ?",
                (to_micros(expires), lease.key, lease.holder),
            )
            return cursor.rowcount == 1

        return Lease(lease.key, lease.holder, expires) if await self._db.write(extend) else None

    async def release(self, lease: Lease) -> None:
        def drop(connection: sqlite3.Connection) -> None:
            connection.execute(
                "DELETE FROM maintenance_leases WHERE key = ? AND holder = ?",
                (lease.key, lease.holder),
            )

        await self._db.write(drop)

    async def current(self, key: str) -> Lease | None:
        now = to_micros(self._clock())

        def read(connection: sqlite3.Connection) -> Lease | None:
            row = connection.execute(
                "SELECT holder, expires_us FROM maintenance_leases "
                "WHERE key = ? AND expires_us > ?",
                (key, now),
            ).fetchone()
            return None if row is None else Lease(key, str(row[0]), from_micros(int(row[1])))

        return await self._db.read(read)


def _run_values(run: JobRun) -> tuple[Any, ...]:
    record = run_to_dict(run)
    return (
        record["run_id"],
        record["job"],
        record["space_id"],
        record["started_us"],
        record["finished_us"],
        record["outcome"],
        record["worker"],
        int(record["on_demand"]),
        json.dumps(record["counts"]),
        record["message"],
        json.dumps(record["details"]),
    )


def _run_from_row(row: Sequence[Any]) -> JobRun:
    names = [name.strip() for name in _RUN_COLUMNS.split(",")]
    record = dict(zip(names, row, strict=True))
    record["counts"] = json.loads(record["counts"])
    record["details"] = json.loads(record["details"])
    return run_from_dict(record)


class SqliteJobRunStore:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def start(self, run: JobRun) -> None:
        def insert(connection: sqlite3.Connection) -> None:
            connection.execute(
                f"INSERT INTO maintenance_runs ({_RUN_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _run_values(run),
            )

        await self._db.write(insert)

    async def finish(self, run: JobRun) -> None:
        finished = to_micros(run.finished_at or utc_now())
        succeeded = run.outcome is JobOutcome.SUCCEEDED

        def update(connection: sqlite3.Connection) -> None:
            connection.execute(
                f"REPLACE INTO maintenance_runs ({_RUN_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _run_values(run),
            )
            column = "succeeded_us" if succeeded else "failed_us"
            connection.execute(
                f"INSERT INTO maintenance_last (job, space_id, {column}) VALUES (?, ?, ?) "
                f"ON CONFLICT (space_id, job) DO UPDATE SET {column} = "
                f"MAX(COALESCE({column}, 0), excluded.{column})",
                (run.job, run.space.id, finished),
            )

        await self._db.write(update)

    async def abandon(self, job: str, space_id: str, at: datetime, message: str) -> int:
        def mark(connection: sqlite3.Connection) -> int:
            cursor = connection.execute(
                "UPDATE maintenance_runs SET outcome = ?, finished_us = ?, message = ? "
                "WHERE job = ? AND space_id = ? AND outcome = ?",
                (
                    JobOutcome.FAILED.value,
                    to_micros(at),
                    message,
                    job,
                    space_id,
                    JobOutcome.RUNNING.value,
                ),
            )
            return cursor.rowcount

        count: int = await self._db.write(mark)
        return count

    async def page(
        self,
        *,
        space_id: str | None,
        job: str | None,
        before: tuple[int, str] | None,
        limit: int,
    ) -> list[JobRun]:
        clauses: list[str] = []
        params: list[Any] = []
        if space_id is not None:
            clauses.append("space_id = ?")
            params.append(space_id)
        if job:
            clauses.append("job = ?")
            params.append(job)
        if before is not None:
            clauses.append("(started_us < ? OR (started_us = ? AND run_id < ?))")
            params.extend([before[0], before[0], before[1]])
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM maintenance_runs {where}"
            "ORDER BY started_us DESC, run_id DESC LIMIT ?"
        )

        def read(connection: sqlite3.Connection) -> list[JobRun]:
            return [_run_from_row(row) for row in connection.execute(sql, (*params, limit))]

        return await self._db.read(read)

    async def last_runs(self, space_ids: Sequence[str]) -> dict[tuple[str, str], LastRuns]:
        if not space_ids:
            return {}
        marks = ", ".join("?" for _ in space_ids)

        def read(connection: sqlite3.Connection) -> dict[tuple[str, str], LastRuns]:
            rows = connection.execute(
                "SELECT job, space_id, succeeded_us, failed_us FROM maintenance_last "
                f"WHERE space_id IN ({marks})",
                tuple(space_ids),
            ).fetchall()
            return {
                (str(job), str(space)): LastRuns(
                    None if ok is None else from_micros(int(ok)),
                    None if failed is None else from_micros(int(failed)),
                )
                for job, space, ok, failed in rows
            }

        return await self._db.read(read)

    async def prune(self, older_than: datetime, limit: int) -> int:
        def delete(connection: sqlite3.Connection) -> int:
            cursor = connection.execute(
                "DELETE FROM maintenance_runs WHERE run_id IN (SELECT run_id FROM "
                "maintenance_runs WHERE started_us < ? AND outcome != ? LIMIT ?)",
                (to_micros(older_than), JobOutcome.RUNNING.value, limit),
            )
            return cursor.rowcount

        count: int = await self._db.write(delete)
        return count


class SqliteSpaceSettingsStore:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def get_many(self, space_ids: Sequence[str]) -> dict[str, SpaceSettings]:
        if not space_ids:
            return {}
        marks = ", ".join("?" for _ in space_ids)

        def read(connection: sqlite3.Connection) -> dict[str, SpaceSettings]:
            rows = connection.execute(
                f"SELECT space_id, settings FROM space_maintenance WHERE space_id IN ({marks})",
                tuple(space_ids),
            ).fetchall()
            return {str(space): settings_from_dict(json.loads(text)) for space, text in rows}

        return await self._db.read(read)

    async def put(self, space_id: str, settings: SpaceSettings) -> None:
        def upsert(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO space_maintenance (space_id, settings) VALUES (?, ?) "
                "ON CONFLICT (space_id) DO UPDATE SET settings = excluded.settings",
                (space_id, settings_json(settings)),
            )

        await self._db.write(upsert)
