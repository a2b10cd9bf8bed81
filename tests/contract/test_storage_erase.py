"""PurgeDocument, DeleteSpace and ListSpaces over gRPC, on SQLite and on the MongoDB-protocol
server (FerretDB): after an erasure no RPC returns the content, the raw tables and
collections do not hold it, the quota is refunded, a repeated call changes nothing, and only
a tenant admin (or a platform admin) may erase.

The indexes' side (keyword and vector chunks gone) is in tests/e2e/test_erase_indexes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
import tarfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.app.adapters import DATABASE_FILE
from engram.app.embedded import embedded_engram
from engram.backends.mongo import connect
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage.mongo.outbox import MongoOutbox
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.settings import server_settings
from tests.support.stacks import BACKENDS
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = pytest.mark.contract

Stub = storage_pb2_grpc.StorageServiceStub
DENIED = grpc.StatusCode.PERMISSION_DENIED
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND

ADMIN = bearer(mint("root", "acme", "admin"))
MEMBER = bearer(mint("ann", "acme", "member"))
OTHER_ADMIN = bearer(mint("bob", "globex", "admin"))
PLATFORM = bearer(mint("op", "ops", "admin", platform_admin=True))
SERVICE = bearer(service_token())
NOTES_ID = "v1:private:acme::::notes"


@dataclass
class Store:
    stub: Stub
    # Every stored value of every table (SQLite) or collection (MongoDB), as text.
    raw: Callable[[], Awaitable[str]]


def _sqlite_text(path: Path) -> str:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        parts: list[str] = []
        for table in tables:
            for row in connection.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, bytes):
                        value = value.decode("utf-8", "replace")
                    parts.append(str(value))
        return "\n".join(parts)
    finally:
        connection.close()


@contextlib.asynccontextmanager
async def open_store(
    backend: str, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Store]:
    if backend == "sqlite":
        settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
        async with (
            embedded_engram(settings, require_auth=True) as engram,
            grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel,
        ):

            async def sqlite_raw() -> str:
                return await asyncio.to_thread(_sqlite_text, settings.data_dir / DATABASE_FILE)

            yield Store(Stub(channel), sqlite_raw)
        return
    from engram.app.production import storage_on_mongo

    name = f"erase_{uuid.uuid4().hex[:12]}"
    settings = server_settings(
        tmp_path / "engram",
        mongo_uri=real_backends.url("mongo"),
        mongo_db=name,
        jwt_secret=TEST_JWT_SECRET,
    )
    client, database = connect(real_backends.url("mongo"), name)
    try:
        async with (
            storage_on_mongo(settings, publish_events=False) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):

            async def mongo_raw() -> str:
                parts: list[str] = []
                for collection in await database.list_collection_names():
                    async for document in database[collection].find({}):
                        parts.append(repr(document))
                return "\n".join(parts)

            yield Store(Stub(channel), mongo_raw)
    finally:
        await client.close()


@pytest.fixture(params=BACKENDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Store]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with open_store(request.param, tmp_path, real_backends) as opened:
        yield opened


def marker() -> str:
    return f"SECRET-{uuid.uuid4().hex}"


async def write(stub: Stub, path: str, content: str, *, ref: Any = None, who: Any = MEMBER) -> None:
    await stub.WriteDocument(write_request(path, content, ref=ref), metadata=who)


async def usage(stub: Stub, ref: Any = None) -> storage_pb2.GetUsageResponse:
    return await stub.GetUsage(storage_pb2.GetUsageRequest(space=ref or space()), metadata=MEMBER)


async def export_text(stub: Stub, ref: Any = None) -> str:
    data = b"".join(
        [
            chunk.data
            async for chunk in stub.ExportSpace(
                storage_pb2.ExportSpaceRequest(space=ref or space()), metadata=ADMIN
            )
        ]
    )
    texts: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            extracted = archive.extractfile(member)
            if extracted is not None:
                texts.append(extracted.read().decode())
    return "\n".join(texts)


def purge(path: str, ref: Any = None) -> storage_pb2.PurgeDocumentRequest:
    return storage_pb2.PurgeDocumentRequest(space=ref or space(), path=path)


def delete_space(confirm: str, ref: Any = None) -> storage_pb2.DeleteSpaceRequest:
    return storage_pb2.DeleteSpaceRequest(space=ref or space(), confirm_space_id=confirm)


# --- PurgeDocument ---------------------------------------------------------------------------


async def test_purge_erases_the_document_and_every_version(store: Store) -> None:
    stub, secret = store.stub, marker()
    await write(stub, "a.md", f"first {secret}\n")
    await write(stub, "a.md", f"second {secret}\n")
    await write(stub, "a.md", f"third {secret}!\n")
    await write(stub, "b.md", "unrelated\n")
    before = await usage(stub)
    size = len(f"third {secret}!\n")
    assert secret in await store.raw(), "the check below would prove nothing"

    result = await stub.PurgeDocument(purge("a.md"), metadata=ADMIN)
    assert result.purged and result.versions_erased == 2 and result.refunded_bytes == size

    for version in (0, 1, 2, 3):
        await fails(
            stub.ReadDocument(
                storage_pb2.ReadDocumentRequest(space=space(), path="a.md", version=version),
                metadata=MEMBER,
            ),
            NOT_FOUND,
        )
    await fails(
        stub.ListDocumentVersions(
            storage_pb2.ListDocumentVersionsRequest(space=space(), path="a.md"), metadata=MEMBER
        ),
        NOT_FOUND,
    )
    listed = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), recursive=True), metadata=MEMBER
    )
    assert [entry.path for entry in listed.entries] == ["b.md"]
    assert secret not in await export_text(stub)
    assert "unrelated" in await export_text(stub)
    after = await usage(stub)
    assert after.used_bytes == before.used_bytes - size
    assert after.tenant_used_bytes == before.tenant_used_bytes - size
    assert secret not in await store.raw()

    again = await stub.PurgeDocument(purge("a.md"), metadata=ADMIN)
    assert (again.purged, again.versions_erased, again.refunded_bytes) == (False, 0, 0)
    assert (await usage(stub)).used_bytes == after.used_bytes
    assert "memory.purge" in await store.raw(), "the audit row"


async def test_a_platform_admin_purges_in_any_tenant(store: Store) -> None:
    stub = store.stub
    await write(stub, "a.md", "acme's\n")
    result = await stub.PurgeDocument(purge("a.md", space(tenant="acme")), metadata=PLATFORM)
    assert result.purged and result.refunded_bytes == len("acme's\n")
    assert (await usage(stub)).used_bytes == 0


async def test_erasures_leave_audit_rows_without_content(tmp_path: Path) -> None:
    from engram.v1 import authz_pb2, authz_pb2_grpc

    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    secret = marker()
    async with (
        embedded_engram(settings, require_auth=True) as engram,
        grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel,
    ):
        stub = Stub(channel)
        await write(stub, "a.md", f"{secret}\n")
        await write(stub, "b.md", "bee\n")
        await stub.PurgeDocument(purge("a.md"), metadata=ADMIN)
        await stub.DeleteSpace(delete_space(NOTES_ID), metadata=ADMIN)
        listed = await authz_pb2_grpc.AuthzServiceStub(channel).ListAuditEvents(
            authz_pb2.ListAuditEventsRequest(), metadata=PLATFORM
        )
    rows = [e for e in listed.events if e.action.startswith(("memory.purge", "memory.space"))]
    assert [(e.action, e.subject, e.tenant, e.space_id, e.path, e.bytes_delta) for e in rows] == [
        ("memory.purge", "root", "acme", NOTES_ID, "a.md", -len(f"{secret}\n")),
        ("memory.space_delete", "root", "acme", NOTES_ID, "", -len("bee\n")),
    ]
    assert all(e.at.seconds > 0 for e in rows)
    assert secret not in repr(listed)


async def test_purge_erases_a_deleted_documents_kept_versions(store: Store) -> None:
    stub, secret = store.stub, marker()
    await write(stub, "gone.md", f"once {secret}\n")
    await stub.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=space(), path="gone.md"), metadata=MEMBER
    )
    kept = await stub.ListDocumentVersions(
        storage_pb2.ListDocumentVersionsRequest(space=space(), path="gone.md"), metadata=MEMBER
    )
    assert kept.versions, "a delete keeps the content as a version"

    result = await stub.PurgeDocument(purge("gone.md"), metadata=ADMIN)
    assert result.purged and result.versions_erased == 1 and result.refunded_bytes == 0
    await fails(
        stub.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space(), path="gone.md", version=1),
            metadata=MEMBER,
        ),
        NOT_FOUND,
    )
    assert secret not in await store.raw()


async def test_a_purged_path_can_be_written_again_from_scratch(store: Store) -> None:
    stub, secret = store.stub, marker()
    await write(stub, "a.md", f"old {secret}\n")
    await write(stub, "a.md", f"older {secret}\n")
    await stub.PurgeDocument(purge("a.md"), metadata=ADMIN)
    await write(stub, "a.md", "fresh\n")
    read = await stub.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=MEMBER
    )
    assert read.document.content == "fresh\n" and read.document.version == 1
    versions = await stub.ListDocumentVersions(
        storage_pb2.ListDocumentVersionsRequest(space=space(), path="a.md"), metadata=MEMBER
    )
    assert [v.current for v in versions.versions] == [True]
    assert secret not in await store.raw()


async def test_only_admins_purge(store: Store) -> None:
    stub = store.stub
    await write(stub, "a.md", "keep me\n")
    for who in (MEMBER, SERVICE):
        ref = space(tenant="acme") if who is SERVICE else space()
        await fails(stub.PurgeDocument(purge("a.md", ref), metadata=who), DENIED)
    # Another tenant's admin names their own tenant's space: nothing of acme's is touched.
    await fails(
        stub.PurgeDocument(purge("a.md", space(tenant="acme")), metadata=OTHER_ADMIN), DENIED
    )
    await fails(stub.PurgeDocument(purge("../x"), metadata=ADMIN), INVALID)
    read = await stub.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=MEMBER
    )
    assert read.document.content == "keep me\n"


# --- DeleteSpace -----------------------------------------------------------------------------


async def test_delete_space_erases_the_whole_space(store: Store) -> None:
    stub, secret = store.stub, marker()
    other = space("keep")
    await write(stub, "a.md", f"a {secret}\n")
    await write(stub, "a.md", f"a2 {secret}\n")
    await write(stub, "dir/b.md", f"b {secret}\n")
    await write(stub, "c.md", f"c {secret}\n")
    await stub.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=space(), path="c.md"), metadata=MEMBER
    )
    await write(stub, "x.md", "other space\n", ref=other)
    before = await usage(stub)
    assert before.used_bytes > 0

    wrong = await fails(stub.DeleteSpace(delete_space("notes"), metadata=ADMIN), INVALID)
    assert NOTES_ID in wrong.message, "the error names the id to confirm"
    assert (await usage(stub)).used_bytes == before.used_bytes, "refused: nothing erased"

    result = await stub.DeleteSpace(delete_space(NOTES_ID), metadata=ADMIN)
    assert result.space_id == NOTES_ID
    assert result.documents_erased == 3, "a.md, dir/b.md and the deleted c.md's versions"
    assert result.versions_erased == 2  # a.md's first version and c.md's deleted one
    assert result.refunded_bytes == before.used_bytes

    listed = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), recursive=True), metadata=MEMBER
    )
    assert list(listed.entries) == []
    for path in ("a.md", "dir/b.md", "c.md"):
        await fails(
            stub.ListDocumentVersions(
                storage_pb2.ListDocumentVersionsRequest(space=space(), path=path),
                metadata=MEMBER,
            ),
            NOT_FOUND,
        )
    assert secret not in await export_text(stub)
    after = await usage(stub)
    assert after.used_bytes == 0 and after.document_count == 0
    assert after.tenant_used_bytes == before.tenant_used_bytes - before.used_bytes
    assert (await usage(stub, other)).used_bytes == len("other space\n")
    assert secret not in await store.raw()
    assert "other space" in await store.raw()
    assert "memory.space_delete" in await store.raw(), "the audit row"
    spaces = await stub.ListSpaces(storage_pb2.ListSpacesRequest(), metadata=MEMBER)
    assert [s.space_id for s in spaces.spaces] == ["v1:private:acme::::keep"]

    again = await stub.DeleteSpace(delete_space(NOTES_ID), metadata=ADMIN)
    assert (again.documents_erased, again.versions_erased, again.refunded_bytes) == (0, 0, 0)
    # The space is usable again.
    await write(stub, "a.md", "new life\n")
    assert (await usage(stub)).used_bytes == len("new life\n")


async def test_delete_space_racing_writes_leaves_a_consistent_space(store: Store) -> None:
    """Writes keep landing while the space is deleted: whatever survives is readable,
    writable and exactly what the quota counts (no charge lost or refunded twice)."""
    stub = store.stub
    paths = [f"p{i}.md" for i in range(4)]
    for path in paths:
        await write(stub, path, f"{path} before\n")

    async def writer(n: int) -> None:
        for round_ in range(15):
            path = paths[(n + round_) % len(paths)]
            with contextlib.suppress(grpc.aio.AioRpcError):  # ABORTED after a lost race
                await write(stub, path, f"{path} by {n} round {round_} " + "x" * round_)

    async def deleter() -> None:
        await asyncio.sleep(0.05)
        await stub.DeleteSpace(delete_space(NOTES_ID), metadata=ADMIN)

    await asyncio.gather(writer(0), writer(1), deleter())
    listed = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), recursive=True), metadata=MEMBER
    )
    stored = sum(entry.size_bytes for entry in listed.entries)
    assert (await usage(stub)).used_bytes == stored
    for path in paths:
        await write(stub, path, "after\n")
    assert (await usage(stub)).used_bytes == len("after\n") * len(paths)


async def test_only_admins_delete_spaces(store: Store) -> None:
    stub = store.stub
    await write(stub, "a.md", "keep me\n")
    await fails(stub.DeleteSpace(delete_space(NOTES_ID), metadata=MEMBER), DENIED)
    await fails(
        stub.DeleteSpace(delete_space(NOTES_ID, space(tenant="acme")), metadata=SERVICE), DENIED
    )
    global_ref = space("shared", visibility=space_pb2.VISIBILITY_GLOBAL)
    await write(stub, "g.md", "global\n", ref=global_ref, who=PLATFORM)
    global_id = "v1:global:::::shared"
    await fails(stub.DeleteSpace(delete_space(global_id, global_ref), metadata=ADMIN), DENIED)
    assert (await usage(stub)).used_bytes == len("keep me\n")
    deleted = await stub.DeleteSpace(delete_space(global_id, global_ref), metadata=PLATFORM)
    assert deleted.documents_erased == 1


# --- ListSpaces ------------------------------------------------------------------------------


async def test_list_spaces_pages_through_a_tenants_spaces(store: Store) -> None:
    stub = store.stub
    started = datetime.now(UTC).replace(microsecond=0)
    for name, files in (("alpha", 1), ("beta", 2), ("gamma", 3)):
        for i in range(files):
            await write(stub, f"{i}.md", "x" * (10 + i), ref=space(name))
    await write(stub, "a.md", "globex's\n", ref=space("alpha"), who=OTHER_ADMIN)

    first = await stub.ListSpaces(storage_pb2.ListSpacesRequest(page_size=2), metadata=MEMBER)
    assert [s.space.name for s in first.spaces] == ["alpha", "beta"] and first.next_page_token
    second = await stub.ListSpaces(
        storage_pb2.ListSpacesRequest(page_size=2, page_token=first.next_page_token),
        metadata=MEMBER,
    )
    assert [s.space.name for s in second.spaces] == ["gamma"] and not second.next_page_token
    gamma = second.spaces[0]
    assert gamma.space_id == "v1:private:acme::::gamma" and gamma.space.tenant == "acme"
    assert gamma.document_count == 3 and gamma.used_bytes == 10 + 11 + 12
    assert gamma.last_write_at.ToDatetime(tzinfo=UTC) >= started

    # Another tenant: refused to a tenant admin, shown to a platform admin.
    await fails(
        stub.ListSpaces(storage_pb2.ListSpacesRequest(tenant="globex"), metadata=ADMIN), DENIED
    )
    theirs = await stub.ListSpaces(
        storage_pb2.ListSpacesRequest(tenant="globex"), metadata=PLATFORM
    )
    assert [s.space_id for s in theirs.spaces] == ["v1:private:globex::::alpha"]
    await fails(
        stub.ListSpaces(storage_pb2.ListSpacesRequest(page_size=-1), metadata=MEMBER), INVALID
    )
    await fails(
        stub.ListSpaces(
            storage_pb2.ListSpacesRequest(tenant="globex", page_token=first.next_page_token),
            metadata=PLATFORM,
        ),
        INVALID,
    )


async def test_list_spaces_global(store: Store) -> None:
    stub = store.stub
    global_ref = space("handbook", visibility=space_pb2.VISIBILITY_GLOBAL)
    await write(stub, "h.md", "for everyone\n", ref=global_ref, who=PLATFORM)
    request = storage_pb2.ListSpacesRequest(**{"global": True})
    for who in (MEMBER, OTHER_ADMIN):
        listed = await stub.ListSpaces(request, metadata=who)
        assert [s.space_id for s in listed.spaces] == ["v1:global:::::handbook"]
    both = storage_pb2.ListSpacesRequest(tenant="acme", **{"global": True})
    await fails(stub.ListSpaces(both, metadata=MEMBER), INVALID)


async def test_sqlite_file_keeps_no_byte_of_a_purged_document(tmp_path: Path) -> None:
    """Not only the tables: the freed pages of the database file are zeroed too (large
    documents live in overflow pages, which a plain delete leaves on the free list when the
    SQLite build does not default to secure_delete; Debian's does)."""
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    secret = marker()
    async with (
        embedded_engram(settings, require_auth=True) as engram,
        grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel,
    ):
        stub = Stub(channel)
        await write(stub, "big.md", f"{secret} " * 2000)
        await write(stub, "big.md", f"{secret}! " * 2000)
        await write(stub, "small.md", f"{secret}\n")
        await write(stub, "other.md", "stays\n" * 500)
        await stub.PurgeDocument(purge("big.md"), metadata=ADMIN)
        await stub.PurgeDocument(purge("small.md"), metadata=ADMIN)
    # Stopped: the last connection checkpointed the WAL into the file.
    files = sorted(settings.data_dir.glob(f"{DATABASE_FILE}*"))
    data = b"".join(path.read_bytes() for path in files)
    assert b"stays" in data
    assert secret.encode() not in data


# --- MongoDB: a crash between the commit and the erasure -----------------------------------

SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")


@pytest.mark.real_backend
async def test_mongo_erasure_interrupted_after_its_commit_is_finished_by_the_relay(
    real_backends: RealBackends, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram.domain.documents import DocumentWrite, Erasure
    from engram.storage.service import content_facts

    client, database = connect(real_backends.url("mongo"), f"erase_{uuid.uuid4().hex[:10]}")
    try:
        repository = MongoDocumentRepository(database, retention=5)
        await repository.ensure_indexes()
        secret = marker()
        at = datetime.now(UTC).replace(microsecond=0)

        async def save(path: str, content: str, version: int) -> None:
            sha, size, words = content_facts(content)
            await repository.save(
                DocumentWrite(
                    space=SPACE,
                    path=path,
                    content=content,
                    sha256=sha,
                    size_bytes=size,
                    word_count=words,
                    expected_version=version,
                    document_id=f"d-{path}",
                    at=at,
                    by="ann",
                    event_id=uuid.uuid4().hex,
                )
            )

        await save("a.md", f"one {secret}", 0)
        await save("a.md", f"two {secret}", 1)
        await save("b.md", f"b {secret}", 0)

        # The process dies right after committing each erasure: nothing of the revisions
        # before the tombstone is deleted yet.
        async def crash(*_: Any) -> Any:
            raise ConnectionError("process died")

        monkeypatch.setattr(repository.erasures, "_erase_below", crash)
        monkeypatch.setattr(repository.erasures, "_erase_paths", crash)
        with pytest.raises(ConnectionError):
            await repository.erase(Erasure(SPACE, "a.md", at, "root", uuid.uuid4().hex))
        assert await repository.get(SPACE.id, "a.md") is None, "reads see the purge at once"
        assert await repository.list_versions(SPACE.id, "a.md", before_seq=None, limit=10) == []
        assert await repository.get_version(SPACE.id, "a.md", 1) is None
        with pytest.raises(ConnectionError):
            await repository.erase(Erasure(SPACE, "", at, "root", uuid.uuid4().hex))
        revisions = [repr(r) async for r in database["revisions"].find({})]
        assert any(secret in text for text in revisions), "the crash left content behind"
        monkeypatch.undo()

        # The relay's next pass finishes both erasures before publishing their events.
        messages = await MongoOutbox(repository).pending(100)
        ops = {m.subject.split(".")[2] for m in messages}
        assert {"purge", "space_delete"} <= ops
        for collection in await database.list_collection_names():
            async for document in database[collection].find({}):
                assert secret not in repr(document), f"{collection} still holds it"
        assert await repository.get(SPACE.id, "b.md") is None
    finally:
        await client.close()
