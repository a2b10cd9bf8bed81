"""MongoDocumentRepository: documents as per-path revision chains on MongoDB (the design is
in engram.storage.mongo). One repository made of rooms sharing one holder of the
collections and the chain: documents, listing, versions, erasure and the outbox."""

from __future__ import annotations

from engram.backends.mongo import MongoDatabase
from engram.storage.mongo.chains import MongoChains
from engram.storage.mongo.documents import MongoDocuments
from engram.storage.mongo.erasure import MongoErasures
from engram.storage.mongo.listing import MongoListings
from engram.storage.mongo.outbox import (
    ABANDONED_POINTER,
    HEAD_GRACE,
    PendingRevisions,
    revision_event,
)
from engram.storage.mongo.records import head_id, revision_id
from engram.storage.mongo.versions import MongoVersions

__all__ = [
    "ABANDONED_POINTER",
    "HEAD_GRACE",
    "MongoDocumentRepository",
    "head_id",
    "revision_event",
    "revision_id",
]


class MongoDocumentRepository:
    """The DocumentRepository port on MongoDB: each method is its room's."""

    def __init__(self, database: MongoDatabase, *, retention: int) -> None:
        self.chains = MongoChains(database, retention=retention)
        self.documents = MongoDocuments(self.chains)
        self.listings = MongoListings(self.chains)
        self.versions = MongoVersions(self.chains)
        self.erasures = MongoErasures(self.chains)
        self.outbox = PendingRevisions(
            self.chains.pointers, self.chains, self.erasures.finish_erasure
        )
        # The chain
        self.on_commit = self.chains.on_commit
        self.ensure_indexes = self.chains.ensure_indexes
        self.refresh = self.chains.refresh
        self.get = self.chains.get
        # Documents
        self.head = self.documents.head
        self.get_many = self.documents.get_many
        self.save = self.documents.save
        self.save_many = self.documents.save_many
        self.delete = self.documents.delete
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
        # Erasure
        self.erase = self.erasures.erase
        self.finish_erasure = self.erasures.finish_erasure
        # The outbox
        self.pending_revisions = self.outbox.pending_revisions
        self.clear_events = self.outbox.clear_events
        self.outbox_backlog = self.outbox.backlog
