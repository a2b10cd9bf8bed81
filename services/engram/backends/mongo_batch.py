"""GroupedWrites and GroupedReplaces: concurrent callers' single-document writes, sent as
one command.

FerretDB's cost is per command (its own work and PostgreSQL's transaction per command,
and the driver's per round trip), not per document: an unordered `insert_many` of 10
documents costs about what one `insert_one` does. So inserts into one collection queue
while one unordered bulk insert is in flight and go out together in the next; a caller
alone pays no wait. Each caller still gets its own outcome: an unordered insert applies
every document it can and reports each failure on its own, so a caller whose insert
collided gets DuplicateKeyError exactly as from `insert_one` (the unique-`_id` insert stays
the atomic primitive it is in storage/mongo_repository.py and quota/mongo_ledger.py).

GroupedReplaces does the same for guarded replaces (one `update` command of many
statements). FerretDB 1.24 applies such a command's statements in order and stops at the
first that fails, reporting it under a wrong index (and PyMongo's bulk write does not
survive its reply, which can lack `nModified`): so the command is sent raw, and a group
that reports any error is sent again one replace at a time. A replace sent again after its
statement had landed finds its filter unmatched and its `_id` taken, so it raises
DuplicateKeyError like one that lost: only for replaces where both mean the same, "this
replacement or a newer one is in place" (a head's `rev` guard).

A caller cancelled while its write is still queued takes it out (it is never sent); a
write already sent may land, as with a cancelled `insert_one`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from bson.errors import InvalidDocument
from pymongo import InsertOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, PyMongoError

from engram.backends.mongo import MongoCollection

# Documents per command at most (the driver splits larger messages by size anyway).
MAX_GROUP = 128
DUPLICATE_KEY = 11000


Operation = TypeVar("Operation")


class _Grouped(ABC, Generic[Operation]):
    """Concurrent callers' operations on one collection, queued while one group is in
    flight and sent together in the next; a caller alone pays no wait."""

    def __init__(self, collection: MongoCollection, *, max_group: int = MAX_GROUP) -> None:
        self._collection = collection
        self._max_group = max_group
        self._queue: list[tuple[Operation, asyncio.Future[None]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def _submit(self, operation: Operation) -> None:
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Retrieved here, so an outcome nobody awaits any more (its caller was cancelled
        # after sending) is not reported as an exception never retrieved.
        outcome.add_done_callback(_retrieve)
        entry = (operation, outcome)
        self._queue.append(entry)
        sender = self._sender
        if sender is None or sender.done() or sender.get_loop() is not outcome.get_loop():
            self._sender = asyncio.create_task(self._send(), name="mongo-grouped-writes")
        try:
            await asyncio.shield(entry[1])
        except asyncio.CancelledError:
            if entry in self._queue:
                self._queue.remove(entry)
            raise

    async def _send(self) -> None:
        while self._queue:
            group, self._queue = self._queue[: self._max_group], self._queue[self._max_group :]
            try:
                await self._apply(group)
            except (PyMongoError, InvalidDocument, TypeError, ValueError) as error:
                # The group's write failed as a whole (the server, the connection, a
                # document the driver cannot encode): each of its callers raises the error.
                for _, outcome in group:
                    if not outcome.done():
                        outcome.set_exception(error)
            except asyncio.CancelledError:
                # The sender stops (shutdown): what is still queued fails with it.
                for _, outcome in group + self._queue:
                    outcome.cancel()
                self._queue = []
                raise
            finally:
                # Anything else is a bug that ends this sender: no caller of the group is
                # left waiting for an answer that will never come.
                for _, outcome in group:
                    if not outcome.done():
                        outcome.set_exception(
                            RuntimeError("a grouped Mongo write failed: see the storage log")
                        )

    @abstractmethod
    async def _apply(self, group: list[tuple[Operation, asyncio.Future[None]]]) -> None:
        """Sends the group and settles each caller's outcome."""


class GroupedWrites(_Grouped[InsertOne[dict[str, Any]]]):
    async def insert(self, document: dict[str, Any]) -> None:
        """Inserts `document`; raises DuplicateKeyError if its `_id` is taken (and the
        driver's errors, as `insert_one` would)."""
        await self._submit(InsertOne(document))

    async def _apply(
        self, group: list[tuple[InsertOne[dict[str, Any]], asyncio.Future[None]]]
    ) -> None:
        try:
            await self._collection.bulk_write([operation for operation, _ in group], ordered=False)
        except BulkWriteError as error:
            failed = {int(e["index"]): e for e in error.details.get("writeErrors", [])}
            for index, (_, outcome) in enumerate(group):
                if index in failed:
                    outcome.set_exception(_document_error(failed[index]))
                else:
                    outcome.set_result(None)
            return
        for _, outcome in group:
            outcome.set_result(None)


# (filter, replacement): a replace_one with upsert.
_Replace = tuple[dict[str, Any], dict[str, Any]]


class GroupedReplaces(_Grouped[_Replace]):
    async def replace(self, filter: dict[str, Any], replacement: dict[str, Any]) -> None:
        """`replace_one(filter, replacement, upsert=True)`, as it raises: DuplicateKeyError
        when `filter` matches nothing and the replacement's `_id` is taken, which includes
        this replacement itself being in place already (see the module docstring)."""
        await self._submit((filter, replacement))

    async def _apply(self, group: list[tuple[_Replace, asyncio.Future[None]]]) -> None:
        reply = await self._collection.database.command(
            {
                "update": self._collection.name,
                "updates": [{"q": q, "u": u, "upsert": True} for (q, u), _ in group],
                "ordered": False,
            }
        )
        if not reply.get("writeErrors") and not reply.get("writeConcernError"):
            for _, outcome in group:
                outcome.set_result(None)
            return
        # Which statements landed is not reliably reported: each is sent again on its own.
        for (q, u), outcome in group:
            try:
                await self._collection.replace_one(q, u, upsert=True)
            except (PyMongoError, InvalidDocument) as error:
                outcome.set_exception(error)
            else:
                outcome.set_result(None)


def _retrieve(outcome: asyncio.Future[None]) -> None:
    if not outcome.cancelled():
        outcome.exception()


def _document_error(write_error: dict[str, Any]) -> PyMongoError:
    code = int(write_error.get("code", 0))
    message = str(write_error.get("errmsg", "write error"))
    if code == DUPLICATE_KEY:
        return DuplicateKeyError(message, code, write_error)
    return OperationFailure(message, code, write_error)
