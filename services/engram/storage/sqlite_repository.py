"""SqliteDocumentRepository: documents, kept versions and the event outbox in one SQLite file.

Every change is one transaction on the writer thread that (1) checks the stored version,
(2) moves the old content into `document_versions` and prunes beyond the retention,
(3) writes the document and (4) appends its event to `outbox` (engram.storage.sqlite_outbox,
the outbox's one owner). Paths compare in byte order
(BINARY collation over UTF-8), the same order MongoDB uses.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any

from engram.backends.sqlite import SqliteDatabase, from_micros, to_micros
from engram.domain.documents import (
    DocumentDeletion,
    DocumentEvent,
    DocumentHead,
    DocumentVersion,
    DocumentWrite,
    Erasure,
    ErasureResult,
    PathEntry,
    SpaceSummary,
    SpaceUsage,
    StoredDocument,
)
from engram.domain.quotas import aggregate_owner
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.storage.ports import ConcurrentModification
from engram.storage.sqlite_outbox import OUTBOX_SCHEMA, record_change, record_request

DOCUMENT_TABLES = """
CREATE TABLE IF NOT EXISTS documents (
    id          INTEGER PRIMARY KEY,
    space_id    TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    content     TEXT    NOT NULL,
    sha256      TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    word_count  INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    created_us  INTEGER NOT NULL,
    updated_us  INTEGER NOT NULL,
    updated_by  TEXT    NOT NULL,
    UNIQUE (space_id, path)
);
CREATE INDEX IF NOT EXISTS documents_by_tenant ON documents (tenant, space_id);
CREATE TABLE IF NOT EXISTS document_versions (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    space_id    TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    content     TEXT    NOT NULL,
    sha256      TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    updated_us  INTEGER NOT NULL,
    updated_by  TEXT    NOT NULL,
    deleted     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS document_versions_by_path
    ON document_versions (space_id, path, seq);
"""
SCHEMA = DOCUMENT_TABLES + OUTBOX_SCHEMA


_DOCUMENT_COLUMNS = (
    "space_id, path, content, sha256, size_bytes, word_count, version, document_id, "
    "created_us, updated_us, updated_by"
)


def _document(row: Any) -> StoredDocument:
    (
        space_id,
        path,
        content,
        sha256,
        size_bytes,
        words,
        version,
        document_id,
        created_us,
        updated_us,
        updated_by,
    ) = row
    return StoredDocument(
        space=parse_space_id(str(space_id)),
        path=str(path),
        content=str(content),
        sha256=str(sha256),
        size_bytes=int(size_bytes),
        word_count=int(words),
        version=int(version),
        document_id=str(document_id),
        created_at=from_micros(int(created_us)),
        updated_at=from_micros(int(updated_us)),
        updated_by=str(updated_by),
    )


def _version(row: Any, *, with_content: bool) -> DocumentVersion:
    seq, document_id, version, sha256, size_bytes, updated_us, updated_by, deleted, content = row
    return DocumentVersion(
        document_id=str(document_id),
        version=int(version),
        sha256=str(sha256),
        size_bytes=int(size_bytes),
        updated_at=from_micros(int(updated_us)),
        updated_by=str(updated_by),
        content=str(content) if with_content else "",
        deleted=bool(deleted),
        seq=int(seq),
    )


class SqliteDocumentRepository:
    def __init__(self, database: SqliteDatabase, *, retention: int) -> None:
        self._db = database
        self._retention = retention

    async def get(
        self, space_id: str, path: str, *, trust_head: bool = False
    ) -> StoredDocument | None:
        del trust_head  # one transaction writes a document's row and its version

        def work(connection: sqlite3.Connection) -> StoredDocument | None:
            row = connection.execute(
                f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE space_id = ? AND path = ?",
                (space_id, path),
            ).fetchone()
            return _document(row) if row else None

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
                    f"SELECT {_DOCUMENT_COLUMNS} FROM documents "
                    f"WHERE space_id = ? AND path IN ({marks})",
                    (space_id, *chunk),
                ):
                    document = _document(row)
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

    async def list_paths(
        self, space_id: str, *, directory: str, start: str, inclusive: bool, limit: int
    ) -> list[PathEntry]:
        lower, op = start, (">=" if inclusive else ">")
        bounds = ""
        params: list[object] = [space_id, lower]
        if directory:
            bounds = "AND path >= ? AND path < ? "
            params += [directory + "/", directory + "0"]
        params.append(limit)

        def work(connection: sqlite3.Connection) -> list[PathEntry]:
            rows = connection.execute(
                f"SELECT path, size_bytes, updated_us FROM documents "
                f"WHERE space_id = ? AND path {op} ? {bounds}ORDER BY path LIMIT ?",
                params,
            ).fetchall()
            return [PathEntry(str(p), int(s), from_micros(int(u))) for p, s, u in rows]

        return await self._db.read(work)

    async def list_documents(
        self, space_id: str, *, after: str, limit: int
    ) -> list[StoredDocument]:
        def work(connection: sqlite3.Connection) -> list[StoredDocument]:
            rows = connection.execute(
                f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE space_id = ? AND path > ? "
                "ORDER BY path LIMIT ?",
                (space_id, after, limit),
            ).fetchall()
            return [_document(row) for row in rows]

        return await self._db.read(work)

    async def iter_paths(
        self, space_id: str | None = None, *, page_size: int = 1000
    ) -> AsyncIterator[tuple[str, str]]:
        """(space_id, path) of every document of one space (or of all), in that order, read
        a page at a time (the indexer's backfill)."""
        after = ("", "")
        while True:

            def work(connection: sqlite3.Connection, after: tuple[str, str] = after) -> list[Any]:
                if space_id is None:
                    return connection.execute(
                        "SELECT space_id, path FROM documents WHERE (space_id, path) > (?, ?) "
                        "ORDER BY space_id, path LIMIT ?",
                        (*after, page_size),
                    ).fetchall()
                return connection.execute(
                    "SELECT space_id, path FROM documents WHERE space_id = ? AND path > ? "
                    "ORDER BY path LIMIT ?",
                    (space_id, after[1], page_size),
                ).fetchall()

            rows = await self._db.read(work)
            for found_space, path in rows:
                yield str(found_space), str(path)
            if len(rows) < page_size:
                return
            after = (str(rows[-1][0]), str(rows[-1][1]))

    async def record_events(self, events: Sequence[DocumentEvent]) -> None:
        """Appends events to the outbox without changing a document: the indexer's reindex
        requests, which then travel the same durable path as changes."""

        def work(connection: sqlite3.Connection) -> None:
            for event in events:
                record_request(connection, event)

        await self._db.write(work)

    async def get_version(self, space_id: str, path: str, version: int) -> DocumentVersion | None:
        def work(connection: sqlite3.Connection) -> DocumentVersion | None:
            current = connection.execute(
                "SELECT document_id FROM documents WHERE space_id = ? AND path = ?",
                (space_id, path),
            ).fetchone()
            if current is None:
                current = connection.execute(
                    "SELECT document_id FROM document_versions WHERE space_id = ? AND path = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (space_id, path),
                ).fetchone()
            if current is None:
                return None
            row = connection.execute(
                "SELECT seq, document_id, version, sha256, size_bytes, updated_us, updated_by, "
                "deleted, content FROM document_versions "
                "WHERE space_id = ? AND path = ? AND document_id = ? AND version = ? "
                "ORDER BY seq DESC LIMIT 1",
                (space_id, path, current[0], version),
            ).fetchone()
            return _version(row, with_content=True) if row else None

        return await self._db.read_snapshot(work)

    async def list_versions(
        self, space_id: str, path: str, *, before_seq: int | None, limit: int
    ) -> list[DocumentVersion]:
        def work(connection: sqlite3.Connection) -> list[DocumentVersion]:
            rows = connection.execute(
                "SELECT seq, document_id, version, sha256, size_bytes, updated_us, updated_by, "
                "deleted, '' FROM document_versions WHERE space_id = ? AND path = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT ?",
                (space_id, path, before_seq if before_seq is not None else 2**62, limit),
            ).fetchall()
            return [_version(row, with_content=False) for row in rows]

        return await self._db.read(work)

    async def space_usage(self, space_id: str) -> SpaceUsage:
        def work(connection: sqlite3.Connection) -> SpaceUsage:
            used, count = connection.execute(
                "SELECT COALESCE(SUM(size_bytes), 0), COUNT(*) FROM documents WHERE space_id = ?",
                (space_id,),
            ).fetchone()
            return SpaceUsage(used_bytes=int(used), document_count=int(count))

        return await self._db.read(work)

    async def prune_versions(self, space_id: str) -> int:
        def work(connection: sqlite3.Connection) -> int:
            cursor = connection.execute(
                "DELETE FROM document_versions WHERE seq IN ("
                "SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER "
                "(PARTITION BY path ORDER BY seq DESC) AS newer FROM document_versions "
                "WHERE space_id = ?) WHERE newer > ?)",
                (space_id, self._retention),
            )
            return int(cursor.rowcount)

        return await self._db.write(work)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        def work(connection: sqlite3.Connection) -> dict[str, int]:
            rows = connection.execute(
                "SELECT space_id, SUM(size_bytes) FROM documents WHERE tenant = ? "
                "GROUP BY space_id",
                (aggregate_owner,),
            ).fetchall()
            return {str(space_id): int(total) for space_id, total in rows}

        return await self._db.read(work)

    async def list_spaces(
        self, aggregate_owner: str, *, after: str, limit: int
    ) -> list[SpaceSummary]:
        def work(connection: sqlite3.Connection) -> list[SpaceSummary]:
            rows = connection.execute(
                "SELECT space_id, COUNT(*), SUM(size_bytes), MAX(updated_us) FROM documents "
                "WHERE tenant = ? AND space_id > ? GROUP BY space_id ORDER BY space_id LIMIT ?",
                (aggregate_owner, after, limit),
            ).fetchall()
            return [
                SpaceSummary(
                    space=parse_space_id(str(space_id)),
                    document_count=int(count),
                    used_bytes=int(used),
                    last_write_at=from_micros(int(last)),
                )
                for space_id, count, used, last in rows
            ]

        return await self._db.read(work)

    async def all_spaces(self, *, after: str, limit: int) -> list[SpaceRef]:
        def work(connection: sqlite3.Connection) -> list[SpaceRef]:
            rows = connection.execute(
                "SELECT DISTINCT space_id FROM documents WHERE space_id > ? "
                "ORDER BY space_id LIMIT ?",
                (after, limit),
            ).fetchall()
            return [parse_space_id(str(space_id)) for (space_id,) in rows]

        return await self._db.read(work)
