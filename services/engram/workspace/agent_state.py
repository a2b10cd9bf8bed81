"""Per-agent state the workspace keeps beside the documents: the SOUL.md baseline.

GetSystemPrompt swaps the agent's baseline (SOUL.md's sha256 at this assembly, "" without
SOUL.md) for the one stored at the previous assembly: a different previous value means
SOUL.md changed, and the prompt carries the notice. The swap is atomic, so among racing
assemblies exactly one sees each change and the notice appears once.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

from pymongo import DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from engram.backends.mongo import MongoDatabase, ensure_indexes, mongo_errors
from engram.backends.sqlite import SqliteDatabase
from engram.domain.errors import Unavailable

# Part of the embedded database's schema (pass it to SqliteDatabase.open).
SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_souls (
    agent_key TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL
) WITHOUT ROWID;
"""

# Racing swaps each insert at most one baseline per round; this bounds a pathological storm.
MAX_SWAP_ATTEMPTS = 32


class AgentStateStore(Protocol):
    async def swap_soul(self, agent_key: str, sha256: str) -> str | None:
        """Stores sha256 as the agent's SOUL baseline; returns the previous one (None first)."""
        ...


class SqliteAgentState:
    """The embedded database: read and upsert in one write transaction (the single writer
    serialises racing swaps)."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def swap_soul(self, agent_key: str, sha256: str) -> str | None:
        def swap(connection: sqlite3.Connection) -> str | None:
            row = connection.execute(
                "SELECT sha256 FROM agent_souls WHERE agent_key = ?", (agent_key,)
            ).fetchone()
            if row is None or row[0] != sha256:
                connection.execute(
                    "INSERT INTO agent_souls (agent_key, sha256) VALUES (?, ?) "
                    "ON CONFLICT (agent_key) DO UPDATE SET sha256 = excluded.sha256",
                    (agent_key, sha256),
                )
            return None if row is None else str(row[0])

        return await self._database.write(swap)


class MongoAgentState:
    """MongoDB and FerretDB. FerretDB v1's updates are not atomic under concurrency: 12
    racing `find_one_and_update(..., upsert=True, return_document=BEFORE)` calls saw one
    change up to 5 times there (repeated notices). So the baseline is a history of inserts
    with unique `_id` `<agent_key>#<seq>`: a swap reads the latest entry and inserts the next
    sequence number; only one racer wins each number, the others reread. A swap to the
    baseline already stored writes nothing, so the history grows by one small entry per
    SOUL.md change. It is never pruned: deleting superseded numbers would let a slow racer
    reinsert one and lose its swap."""

    def __init__(self, database: MongoDatabase, collection: str = "agent_souls") -> None:
        self._collection = database[collection]

    async def ensure_indexes(self) -> None:
        await ensure_indexes(
            self._collection,
            [IndexModel([("agent", 1), ("seq", DESCENDING)], name="agent_seq")],
        )

    async def swap_soul(self, agent_key: str, sha256: str) -> str | None:
        with mongo_errors("swapping an agent's SOUL.md baseline"):
            for _ in range(MAX_SWAP_ATTEMPTS):
                latest = await self._latest(agent_key)
                previous = None if latest is None else str(latest["sha256"])
                if previous == sha256:
                    return previous
                seq = 0 if latest is None else int(latest["seq"]) + 1
                try:
                    await self._collection.insert_one(
                        {
                            "_id": f"{agent_key}#{seq}",
                            "agent": agent_key,
                            "seq": seq,
                            "sha256": sha256,
                        }
                    )
                except DuplicateKeyError:
                    continue
                return previous
        raise Unavailable(
            f"could not record the SOUL.md baseline after {MAX_SWAP_ATTEMPTS} racing attempts; "
            "retry"
        )

    async def _latest(self, agent_key: str) -> dict[str, Any] | None:
        return await self._collection.find_one({"agent": agent_key}, sort=[("seq", DESCENDING)])
