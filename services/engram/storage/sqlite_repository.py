"""SqliteDocumentRepository: documents, kept versions and the event outbox in one SQLite file.

Every change is one transaction on the writer thread that (1) checks the stored version,
(2) moves the old content into `document_versions` and prunes beyond the retention,
(3) writes the document and (4) appends its event to `outbox` (engram.storage.sqlite_outbox,
the outbox's one owner). Paths compare in byte order
(BINARY collation over UTF-8), the same order MongoDB uses.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram.backends.sqlite import SqliteDatabase
from engram.domain.documents import DocumentEvent
from engram.storage.sqlite.documents import SqliteDocuments
from engram.storage.sqlite.listing import SqliteListings
from engram.storage.sqlite.rows import DOCUMENT_TABLES
from engram.storage.sqlite.versions import SqliteVersions
from engram.storage.sqlite_outbox import OUTBOX_SCHEMA, record_requests

SCHEMA = DOCUMENT_TABLES + OUTBOX_SCHEMA


class SqliteDocumentRepository:
    """The DocumentRepository port on SQLite: each method is its room's."""

    def __init__(self, database: SqliteDatabase, *, retention: int) -> None:
        self._db = database
        self.documents = SqliteDocuments(database, retention=retention)
        self.listings = SqliteListings(database)
        self.versions = SqliteVersions(database, retention=retention)
        # Documents
        self.get = self.documents.get
        self.head = self.documents.head
        self.get_many = self.documents.get_many
        self.save = self.documents.save
        self.save_many = self.documents.save_many
        self.delete = self.documents.delete
        self.erase = self.documents.erase
        # Listing
        self.list_paths = self.listings.list_paths
        self.iter_paths = self.listings.iter_paths
        self.space_usage = self.listings.space_usage
        self.usage_by_space = self.listings.usage_by_space
        self.list_spaces = self.listings.list_spaces
        self.all_spaces = self.listings.all_spaces
        self.all_paths = self.listings.all_paths
        # Versions
        self.get_version = self.versions.get_version
        self.list_versions = self.versions.list_versions
        self.prune_versions = self.versions.prune_versions

    async def record_events(self, events: Sequence[DocumentEvent]) -> None:
        """Appends events to the outbox without changing a document (the indexer's reindex
        requests): see sqlite_outbox.record_requests."""
        await record_requests(self._db, events)
