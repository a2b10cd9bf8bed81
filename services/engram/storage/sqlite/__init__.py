"""SqliteDocumentRepository's rooms: documents (reads, writes, erasure), listing and
versions, on one SQLite database (see engram.storage.sqlite_repository)."""
