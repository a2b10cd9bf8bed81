"""Documents on the revision chains: a head's metadata, and writes and deletes (each the
insert of the path's next revision)."""

from __future__ import annotations

from collections.abc import Sequence

from engram.backends.mongo import mongo_errors
from engram.domain.documents import DocumentDeletion, DocumentHead, DocumentWrite, StoredDocument
from engram.storage.mongo.chains import HEAD_METADATA, Chain, MongoChains, head_of, stored
from engram.storage.mongo.records import DELETE, UPSERT, head_id, revision_id, trace_field
from engram.storage.ports import ConcurrentModification


class MongoDocuments:
    def __init__(self, chains: MongoChains) -> None:
        self._chains = chains

    async def head(self, space_id: str, path: str) -> DocumentHead | None:
        """The live document's metadata from its head alone (one `_id` lookup): trusted
        like `get(trust_head=True)`, and kept for the `save` that follows."""
        with mongo_errors("reading a document"):
            head = await self._chains.heads.find_one({"_id": head_id(space_id, path)})
        if head is None:
            self._chains.remember(space_id, path, Chain(0, None))
            return None
        op = head.get("op")
        if op is None or (op == UPSERT and any(field not in head for field in HEAD_METADATA)):
            # A head written before heads carried the metadata: its revision has it.
            chain = Chain(
                int(head["rev"]), await self._chains.revision(space_id, path, int(head["rev"]))
            )
            self._chains.remember(space_id, path, chain)
            return stored(chain.latest).head if chain.alive and chain.latest else None
        latest = {"op": op, "version": head["version"]}
        if op == UPSERT:
            latest["created_at"] = head["created_at"]
        self._chains.remember(space_id, path, Chain(int(head["rev"]), latest))
        return head_of(head) if op == UPSERT else None

    async def get_many(self, space_id: str, paths: Sequence[str]) -> dict[str, StoredDocument]:
        found: dict[str, StoredDocument] = {}
        for path in paths:
            document = await self._chains.get(space_id, path)
            if document is not None:
                found[path] = document
        return found

    async def save(self, change: DocumentWrite) -> StoredDocument:
        chain = await self._chains.chain_for_write(change.space.id, change.path)
        latest = chain.latest
        if change.expected_version == 0 and chain.alive:
            raise ConcurrentModification(f"{change.path!r} was created concurrently")
        if change.expected_version != 0 and (
            not chain.alive or latest is None or latest["version"] != change.expected_version
        ):
            raise ConcurrentModification(f"{change.path!r} changed concurrently")
        created_at = latest["created_at"] if chain.alive and latest is not None else change.at
        await self._chains.commit(
            {
                "_id": revision_id(change.space.id, change.path, chain.rev + 1),
                "space_id": change.space.id,
                "path": change.path,
                "rev": chain.rev + 1,
                "op": UPSERT,
                "document_id": change.document_id,
                "version": change.new_version,
                "content": change.content,
                "sha256": change.sha256,
                "size_bytes": change.size_bytes,
                "word_count": change.word_count,
                "created_at": created_at,
                "at": change.at,
                "by": change.by,
                "event_id": change.event_id,
                **trace_field(change.trace_context),
            }
        )
        return change.stored(created_at=created_at)

    async def save_many(self, changes: Sequence[DocumentWrite]) -> list[StoredDocument]:
        """Without multi-document transactions: applies in order and, if one change loses a
        race, reverts the ones already applied before raising, so nothing stays half-done."""
        applied: list[tuple[DocumentWrite, StoredDocument | None]] = []
        stored: list[StoredDocument] = []
        try:
            for change in changes:
                previous = await self._chains.get(change.space.id, change.path)
                stored.append(await self.save(change))
                applied.append((change, previous))
        except ConcurrentModification:
            for change, previous in reversed(applied):
                await self._revert(change, previous)
            raise
        return stored

    async def _revert(self, change: DocumentWrite, previous: StoredDocument | None) -> None:
        current = await self._chains.get(change.space.id, change.path)
        if current is None or current.sha256 != change.sha256:
            return  # someone else changed it since; theirs stands
        if previous is None:
            await self.delete(
                DocumentDeletion(
                    space=change.space,
                    path=change.path,
                    expected_version=current.version,
                    document_id=current.document_id,
                    sha256=current.sha256,
                    size_bytes=current.size_bytes,
                    at=change.at,
                    by=change.by,
                    event_id=change.event_id + "-revert",
                )
            )
            return
        await self.save(
            DocumentWrite(
                space=change.space,
                path=change.path,
                content=previous.content,
                sha256=previous.sha256,
                size_bytes=previous.size_bytes,
                word_count=previous.word_count,
                expected_version=current.version,
                document_id=current.document_id,
                at=change.at,
                by=change.by,
                event_id=change.event_id + "-revert",
            )
        )

    async def delete(self, deletion: DocumentDeletion) -> None:
        chain = await self._chains.chain_for_write(deletion.space.id, deletion.path)
        latest = chain.latest
        if not chain.alive or latest is None or latest["version"] != deletion.expected_version:
            raise ConcurrentModification(f"{deletion.path!r} changed concurrently")
        await self._chains.commit(
            {
                "_id": revision_id(deletion.space.id, deletion.path, chain.rev + 1),
                "space_id": deletion.space.id,
                "path": deletion.path,
                "rev": chain.rev + 1,
                "op": DELETE,
                "document_id": deletion.document_id,
                "version": deletion.expected_version,
                "sha256": deletion.sha256,
                "size_bytes": deletion.size_bytes,
                "created_at": latest["created_at"],
                "at": deletion.at,
                "by": deletion.by,
                "event_id": deletion.event_id,
                **trace_field(deletion.trace_context),
            }
        )
