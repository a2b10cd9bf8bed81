"""StorageService's use cases, one room per family: documents (read, write, list),
versions, archive (import, export), erasure (purge, delete space) and the change feed.
Each room depends on the shared `core` only, never on another room."""
