"""MongoTokenStore: personal access tokens (hashes only) in MongoDB."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram.authz.tokens import StoredToken
from engram.backends.mongo import MongoDatabase, mongo_errors
from engram.domain.principals import Role


class MongoTokenStore:
    def __init__(self, database: MongoDatabase) -> None:
        self._tokens = database["tokens"]

    async def ensure_indexes(self) -> None:
        """Tokens are keyed by their id (the _id index); a tenant's are listed by id."""
        with mongo_errors("creating the token indexes"):
            await self._tokens.create_index([("tenant", 1), ("_id", 1)], name="tenant_id")

    async def insert(self, token: StoredToken) -> None:
        with mongo_errors("storing a token"):
            await self._tokens.insert_one(
                {
                    "_id": token.token_id,
                    "hash": token.token_hash,
                    "tenant": token.tenant,
                    "user": token.user,
                    "role": token.role.name.lower(),
                    "expires_at": token.expires_at,
                    "created_at": token.created_at,
                    "created_by": token.created_by,
                    "description": token.description,
                    "revoked_at": None,
                }
            )

    async def get(self, token_id: str) -> StoredToken | None:
        with mongo_errors("reading a token"):
            row: dict[str, Any] | None = await self._tokens.find_one({"_id": token_id})
        return None if row is None else _token(row)

    async def list(
        self, tenant: str, *, user: str = "", after: str = "", limit: int
    ) -> list[StoredToken]:
        query: dict[str, Any] = {"tenant": tenant, "_id": {"$gt": after}}
        if user:
            query["user"] = user
        with mongo_errors("listing tokens"):
            rows = await self._tokens.find(query).sort("_id", 1).limit(limit).to_list(length=limit)
        return [_token(row) for row in rows]

    async def revoke(self, token_id: str, at: datetime) -> bool:
        with mongo_errors("revoking a token"):
            result = await self._tokens.update_one({"_id": token_id}, {"$set": {"revoked_at": at}})
        return bool(result.matched_count)


def _token(row: dict[str, Any]) -> StoredToken:
    return StoredToken(
        token_id=row["_id"],
        token_hash=row["hash"],
        tenant=row["tenant"],
        user=row["user"],
        role=Role[row["role"].upper()],
        expires_at=row["expires_at"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        description=row.get("description", ""),
        revoked_at=row.get("revoked_at"),
    )
