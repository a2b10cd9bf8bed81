"""Documents: reads by path, and every change as one transaction on the writer thread that
checks the stored version, keeps the old content as a version (pruning beyond the
retention), writes the document and records its event in the outbox."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.documents import (
    DocumentDeletion,
    DocumentHead,
    DocumentWrite,
    Erasure,
    ErasureResult,
    StoredDocument,
)
from engram.domain.quotas import aggregate_owner
from engram.storage.ports import ConcurrentModification
from engram.storage.sqlite.rows import DOCUMENT_COLUMNS, document_of
from engram.storage.sqlite_outbox import record_change


class SqliteDocuments:
    def __init__(self, database: SqliteDatabase, *, retention: int) -> None:
        self._db = database
        self._retention = retention

    async def get(
        self, space_id: str, path: str, *, trust_head: bool = False
    ) -> StoredDocument | None:
        del trust_head  # one transaction writes a document's row and its version

        def work(connection: sqlite3.Connection) -> StoredDocument | None:
            row = connection.execute(
                f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE space_id = ? AND path = ?",
                (space_id, path),
            ).fetchone()
            return document_of(row) if row else None

        return await self._db.read(work)

    async def head(self, space_id: str, path: str) -> DocumentHead | None:
        document = await self.get(space_id, path)  # one row holds both
        return document.head if document else None

    async def get_many(self, space_id: str, paths: Sequence[str]) -> dict[str, StoredDocument]:
        def work(connection: sqlite3.Connection) -> dict[str, StoredDocument]:
            found: dict[str, StoredDocument] = {}
            for start in range(0, len(paths), 500):
                chunk = list(paths[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for row in connection.execute(
                    f"SELECT {DOCUMENT_COLUMNS} FROM documents "
                    f"WHERE space_id = ? AND path IN ({marks})",
                    (space_id, *chunk),
                ):
                    document = document_of(row)
                    found[document.path] = document
            return found

        return await self._db.read_snapshot(work)

    async def save(self, change: DocumentWrite) -> StoredDocument:
        return (await self.save_many([change]))[0]

    async def save_many(self, changes: Sequence[DocumentWrite]) -> list[StoredDocument]:
        def work(connection: sqlite3.Connection) -> list[StoredDocument]:
            return [self._apply_write(connection, change) for change in changes]

        return await self._db.write(work)

    def _apply_write(self, connection: sqlite3.Connection, change: DocumentWrite) -> StoredDocument:
        space_id = change.space.id
        if change.expected_version == 0:
            try:
                connection.execute(
                    "INSERT INTO documents (space_id, path, tenant, document_id, content, sha256, "
                    "size_bytes, word_count, version, created_us, updated_us, updated_by) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                    (
                        space_id,
                        change.path,
                        aggregate_owner(change.space),
                        change.document_id,
                        change.content,
                        change.sha256,
                        change.size_bytes,
                        change.word_count,
                        to_micros(change.at),
                        to_micros(change.at),
                        change.by,
                    ),
                )
            except sqlite3.IntegrityError:
                raise ConcurrentModification(f"{change.path!r} was created concurrently") from None
            record_change(connection, change.event())
            return change.stored(created_at=change.at)
        previous = connection.execute(
            "SELECT document_id, version, content, sha256, size_bytes, updated_us, updated_by, "
            "created_us FROM documents WHERE space_id = ? AND path = ?",
            (space_id, change.path),
        ).fetchone()
        if previous is None or previous[1] != change.expected_version:
            raise ConcurrentModification(f"{change.path!r} changed concurrently")
        self._keep_version(connection, space_id, change.path, previous, deleted=False)
        connection.execute(
            "UPDATE documents SET content = ?, sha256 = ?, size_bytes = ?, word_count = ?, "
            "version = ?, updated_us = ?, updated_by = ? WHERE space_id = ? AND path = ?",
            (
                change.content,
                change.sha256,
                change.size_bytes,
                change.word_count,
                change.new_version,
                to_micros(change.at),
                change.by,
                space_id,
                change.path,
            ),
        )
        record_change(connection, change.event())
        return change.stored(created_at=from_micros(int(previous[7])))

    def _keep_version(
        self,
        connection: sqlite3.Connection,
        space_id: str,
        path: str,
        previous: Any,
        *,
        deleted: bool,
    ) -> None:
        if self._retention == 0:
            return
        document_id, version, content, sha256, size_bytes, updated_us, updated_by, _ = previous
        connection.execute(
            "INSERT INTO document_versions (space_id, path, document_id, version, content, "
            "sha256, size_bytes, updated_us, updated_by, deleted) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                space_id,
                path,
                document_id,
                version,
                content,
                sha256,
                size_bytes,
                updated_us,
                updated_by,
                int(deleted),
            ),
        )
        connection.execute(
            "DELETE FROM document_versions WHERE space_id = ? AND path = ? AND seq <= ("
            "SELECT seq FROM document_versions WHERE space_id = ? AND path = ? "
            "ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (space_id, path, space_id, path, self._retention),
        )

    async def delete(self, deletion: DocumentDeletion) -> None:
        def work(connection: sqlite3.Connection) -> None:
            space_id = deletion.space.id
            previous = connection.execute(
                "SELECT document_id, version, content, sha256, size_bytes, updated_us, "
                "updated_by, created_us FROM documents WHERE space_id = ? AND path = ?",
                (space_id, deletion.path),
            ).fetchone()
            if previous is None or previous[1] != deletion.expected_version:
                raise ConcurrentModification(f"{deletion.path!r} changed concurrently")
            self._keep_version(connection, space_id, deletion.path, previous, deleted=True)
            connection.execute(
                "DELETE FROM documents WHERE space_id = ? AND path = ?", (space_id, deletion.path)
            )
            record_change(connection, deletion.event())

        await self._db.write(work)

    async def erase(self, erasure: Erasure) -> ErasureResult:
        """One transaction: the documents, every kept version and the event (nothing to
        erase: no event). With secure_delete on for it, SQLite zeroes the freed bytes, so
        the content does not linger in free pages of the file (the WAL frames that held it
        are overwritten as the WAL is reused; the file is clean from the next checkpoint)."""
        scope = "space_id = ?" + ("" if erasure.whole_space else " AND path = ?")
        params = (erasure.space.id,) if erasure.whole_space else (erasure.space.id, erasure.path)

        def work(connection: sqlite3.Connection) -> ErasureResult:
            # Many builds default to on; others do not. Whatever it was is restored after.
            (before,) = connection.execute("PRAGMA secure_delete").fetchone()
            connection.execute("PRAGMA secure_delete=ON")
            try:
                return erase(connection)
            finally:
                connection.execute(f"PRAGMA secure_delete={int(before)}")

        def erase(connection: sqlite3.Connection) -> ErasureResult:
            live = connection.execute(
                f"SELECT path, document_id, version, sha256, size_bytes FROM documents "
                f"WHERE {scope}",
                params,
            ).fetchall()
            kept = connection.execute(
                f"SELECT path, document_id, version, sha256, size_bytes FROM document_versions "
                f"WHERE {scope} ORDER BY seq",
                params,
            ).fetchall()
            if not live and not kept:
                return ErasureResult()
            connection.execute(f"DELETE FROM documents WHERE {scope}", params)
            connection.execute(f"DELETE FROM document_versions WHERE {scope}", params)
            if erasure.whole_space:
                event = erasure.event()
            else:
                # The last state the path held: the live document, else its newest version.
                _, document_id, version, sha256, size_bytes = live[0] if live else kept[-1]
                event = erasure.event(
                    document_id=str(document_id),
                    version=int(version),
                    sha256=str(sha256),
                    size_bytes=int(size_bytes),
                )
            record_change(connection, event)
            return ErasureResult(
                paths=len({row[0] for row in live} | {row[0] for row in kept}),
                live_documents=len(live),
                live_bytes=sum(int(row[4]) for row in live),
                versions=len(kept),
            )

        return await self._db.write(work)
