"""A write reads its path's head without probing past it (one lookup fewer); these tests
commit a revision beyond the head, as a writer that died before its head update leaves it,
and check that no write decided on the stale head is acknowledged wrongly: a conditional
write matching the newest version lands, an "unchanged" write is not taken for a no-op, and
a plain write lands on top of the newest version, keeping it as a version."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.backends.mongo import MongoDatabase, connect
from engram.storage.mongo_repository import revision_id
from engram.v1 import storage_pb2, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.grpc_helpers import space, write_request
from tests.support.stacks import storage_server

pytestmark = [pytest.mark.contract, pytest.mark.real_backend]

SPACE_ID = "v1:private:local::::notes"
Stub = storage_pb2_grpc.StorageServiceStub


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Served:
    def __init__(self, stub: Stub, database: MongoDatabase) -> None:
        self.stub = stub
        self.database = database

    async def commit_beyond_head(self, path: str, content: str) -> None:
        """Inserts revision `rev + 1` of `path` the way a writer does, without its head."""
        head = await self.database["documents"].find_one({"_id": f"{SPACE_ID}\n{path}"})
        assert head is not None
        rev = int(head["rev"])
        latest: dict[str, Any] | None = await self.database["revisions"].find_one(
            {"_id": revision_id(SPACE_ID, path, rev)}
        )
        assert latest is not None
        at = datetime.now(UTC).replace(microsecond=0)
        event_id = uuid.uuid4().hex
        await self.database["outbox"].insert_one(
            {"_id": event_id, "revision": revision_id(SPACE_ID, path, rev + 1), "at": at}
        )
        await self.database["revisions"].insert_one(
            {
                **latest,
                "_id": revision_id(SPACE_ID, path, rev + 1),
                "rev": rev + 1,
                "version": int(latest["version"]) + 1,
                "content": content,
                "sha256": sha(content),
                "size_bytes": len(content.encode()),
                "at": at,
                "event_id": event_id,
            }
        )

    async def read(self, path: str) -> storage_pb2.Document:
        answer = await self.stub.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space(), path=path)
        )
        return answer.document


@pytest.fixture
async def served(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Served]:
    name = f"engram_test_{uuid.uuid4().hex[:12]}"
    client, database = connect(real_backends.url("mongo"), name)
    try:
        async with storage_server("mongo", tmp_path, real_backends, mongo_db=name) as port:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield Served(Stub(channel), database)
    finally:
        await client.close()


async def test_a_write_expecting_the_newest_version_lands(served: Served) -> None:
    await served.stub.WriteDocument(write_request("a.md", "first"))
    await served.commit_beyond_head("a.md", "second")
    written = await served.stub.WriteDocument(
        write_request("a.md", "third", expected_sha256=sha("second"))
    )
    assert written.document.version == 3
    assert (await served.read("a.md")).content == "third"


async def test_a_write_expecting_the_stale_head_is_refused(served: Served) -> None:
    await served.stub.WriteDocument(write_request("b.md", "first"))
    await served.commit_beyond_head("b.md", "second")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.stub.WriteDocument(
            write_request("b.md", "third", expected_sha256=sha("first"))
        )
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert sha("second") in (refused.value.details() or "")
    assert (await served.read("b.md")).content == "second"


async def test_content_equal_to_the_stale_head_is_still_written(served: Served) -> None:
    await served.stub.WriteDocument(write_request("c.md", "same"))
    await served.commit_beyond_head("c.md", "other")
    written = await served.stub.WriteDocument(write_request("c.md", "same"))
    assert written.document.version == 3, "not answered as unchanged from the stale head"
    assert (await served.read("c.md")).content == "same"


async def test_a_plain_write_lands_on_top_of_the_newest_version(served: Served) -> None:
    await served.stub.WriteDocument(write_request("d.md", "first"))
    await served.commit_beyond_head("d.md", "second")
    written = await served.stub.WriteDocument(write_request("d.md", "third"))
    assert written.document.version == 3
    assert (await served.read("d.md")).content == "third"
    versions = await served.stub.ListDocumentVersions(
        storage_pb2.ListDocumentVersionsRequest(space=space(), path="d.md")
    )
    assert [v.version for v in versions.versions][:3] == [3, 2, 1]


async def test_a_create_only_write_over_a_headless_revision_is_refused(served: Served) -> None:
    await served.stub.WriteDocument(write_request("e.md", "first"))
    # Deleting the head leaves the path looking new to a read that trusts the head.
    await served.database["documents"].delete_one({"_id": f"{SPACE_ID}\ne.md"})
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.stub.WriteDocument(write_request("e.md", "again", create_only=True))
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert (await served.read("e.md")).content == "first"


async def test_a_replace_decided_on_the_head_keeps_the_documents_identity(
    served: Served,
) -> None:
    first = (await served.stub.WriteDocument(write_request("f.md", "first"))).document
    head = await served.database["documents"].find_one({"_id": f"{SPACE_ID}\nf.md"})
    assert head is not None and head["sha256"] == sha("first"), "the head carries no sha256"
    written = (
        await served.stub.WriteDocument(
            write_request("f.md", "second", expected_sha256=sha("first"))
        )
    ).document
    assert (written.version, written.document_id) == (2, first.document_id)
    assert written.created_at == first.created_at
    assert written.size_bytes == len("second")


async def test_a_head_written_without_its_metadata_is_read_with_its_revision(
    served: Served,
) -> None:
    first = (await served.stub.WriteDocument(write_request("g.md", "first"))).document
    # Heads written before they carried the metadata a replace decides on.
    await served.database["documents"].update_one(
        {"_id": f"{SPACE_ID}\ng.md"},
        {"$unset": {"sha256": "", "document_id": "", "created_at": ""}},
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await served.stub.WriteDocument(write_request("g.md", "x", expected_sha256=sha("other")))
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert sha("first") in (refused.value.details() or "")
    unchanged = await served.stub.WriteDocument(write_request("g.md", "first"))
    assert unchanged.document.version == 1
    written = (await served.stub.WriteDocument(write_request("g.md", "second"))).document
    assert (written.version, written.document_id) == (2, first.document_id)
    assert written.created_at == first.created_at
