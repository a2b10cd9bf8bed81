"""SqliteTokenStore: personal access tokens (hashes only) in the embedded file."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from engram.authz.tokens import StoredToken
from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.principals import Role

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    token_id    TEXT    PRIMARY KEY,
    token_hash  TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    user        TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    expires_us  INTEGER NOT NULL,
    created_us  INTEGER NOT NULL,
    created_by  TEXT    NOT NULL,
    description TEXT    NOT NULL,
    revoked_us  INTEGER
);
"""

_COLUMNS = (
    "token_id, token_hash, tenant, user, role, expires_us, created_us, created_by, description, "
    "revoked_us"
)


class SqliteTokenStore:
    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    async def insert(self, token: StoredToken) -> None:
        def work(connection: sqlite3.Connection) -> None:
            connection.execute(
                f"INSERT INTO tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    token.token_id,
                    token.token_hash,
                    token.tenant,
                    token.user,
                    token.role.name.lower(),
                    to_micros(token.expires_at),
                    to_micros(token.created_at),
                    token.created_by,
                    token.description,
                ),
            )

        await self._db.write(work)

    async def get(self, token_id: str) -> StoredToken | None:
        def work(connection: sqlite3.Connection) -> StoredToken | None:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM tokens WHERE token_id = ?", (token_id,)
            ).fetchone()
            return None if row is None else _token(row)

        return await self._db.read(work)

    async def list(
        self, tenant: str, *, user: str = "", after: str = "", limit: int
    ) -> list[StoredToken]:
        def work(connection: sqlite3.Connection) -> list[StoredToken]:
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM tokens WHERE tenant = ? AND (? = '' OR user = ?) "
                "AND token_id > ? ORDER BY token_id LIMIT ?",
                (tenant, user, user, after, limit),
            ).fetchall()
            return [_token(row) for row in rows]

        return await self._db.read(work)

    async def revoke(self, token_id: str, at: datetime) -> bool:
        def work(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE tokens SET revoked_us = COALESCE(revoked_us, ?) WHERE token_id = ?",
                (to_micros(at), token_id),
            )
            return cursor.rowcount > 0

        return await self._db.write(work)


def _token(row: tuple[object, ...]) -> StoredToken:
    (tid, digest, tenant, user, role, expires, created, by, description, revoked) = row
    return StoredToken(
        token_id=str(tid),
        token_hash=str(digest),
        tenant=str(tenant),
        user=str(user),
        role=Role[str(role).upper()],
        expires_at=from_micros(int(str(expires))),
        created_at=from_micros(int(str(created))),
        created_by=str(by),
        description=str(description),
        revoked_at=from_micros(int(str(revoked))) if revoked is not None else None,
    )
