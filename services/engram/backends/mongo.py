"""MongoDB plumbing: the PyMongo asyncio client, error mapping, and facts about what we rely on.

Engram relies only on operations that are atomic per single document on every MongoDB
wire-protocol server we run against, including FerretDB v1 (whose updates are NOT atomic
under concurrency): inserts into collections with unique indexes are the only exclusivity
primitive. See storage/mongo_repository.py and quota/mongo_ledger.py for how conditional
writes are built on them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pymongo import AsyncMongoClient, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

from engram.domain.errors import Unavailable

MongoClient = AsyncMongoClient[dict[str, Any]]
MongoDatabase = AsyncDatabase[dict[str, Any]]
MongoCollection = AsyncCollection[dict[str, Any]]


def connect(
    uri: str, database: str, *, timeout_ms: int = 5000
) -> tuple[MongoClient, MongoDatabase]:
    """A client (PyMongo's asyncio API) and its database. The client connects in the
    background on first use; close it with `await client.close()`."""
    client: MongoClient = AsyncMongoClient(
        uri,
        serverSelectionTimeoutMS=timeout_ms,
        connectTimeoutMS=timeout_ms,
        socketTimeoutMS=max(timeout_ms * 3, 15000),
        retryWrites=False,
        tz_aware=True,
        uuidRepresentation="standard",
    )
    return client, client[database]


_UNAVAILABLE = (
    AutoReconnect,
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    ServerSelectionTimeoutError,
    WriteConcernError,
)


@contextlib.contextmanager
def mongo_errors(what: str) -> Iterator[None]:
    """Turns driver connectivity errors into Unavailable, naming the operation."""
    try:
        yield
    except _UNAVAILABLE as error:
        raise Unavailable(f"MongoDB unavailable while {what}: {type(error).__name__}") from None


async def ensure_indexes(collection: MongoCollection, models: list[IndexModel]) -> None:
    """Creates the indexes a collection lacks, one at a time (idempotent).

    Asking FerretDB v1 to create indexes that already exist in a multi-index call crashes
    its connection, so existing ones are listed first and skipped.
    """
    with mongo_errors(f"creating indexes on {collection.name}"):
        existing = {index["name"] async for index in await collection.list_indexes()}
        for model in models:
            if model.document["name"] not in existing:
                await collection.create_indexes([model])
