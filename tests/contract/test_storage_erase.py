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

import pytest

from engram.app.adapters import DATABASE_FILE
from engram.app.embedded import embedded_engram
from engram.backends.mongo import connect
from engram.client import (
    AsyncClient,
    EngramError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Space,
    Usage,
)
from engram.domain.spaces import SpaceRef, Visibility
from engram.storage.mongo.outbox import MongoOutbox
from engram.storage.mongo_repository import MongoDocumentRepository
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.stacks import BACKENDS
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = pytest.mark.contract

ADMIN = mint("root", "acme", "admin")
MEMBER = mint("ann", "acme", "member")
OTHER_ADMIN = mint("bob", "globex", "admin")
PLATFORM = mint("op", "ops", "admin", platform_admin=True)
SERVICE = service_token()
NOTES = Space(name="notes")
# The notes space named with its tenant (a platform admin's or a service's call).
ACME_NOTES = Space(name="notes", tenant="acme")
NOTES_ID = "v1:private:acme::::notes"


class Caller:
    """engram.client on one server, calling as any of the tokens above."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def __call__(self, token: str, space: Space = NOTES) -> AsyncClient:
        return self._client.as_caller(token, space=space)


@dataclass
class Store:
    caller: Caller
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
            AsyncClient(f"127.0.0.1:{engram.port}") as client,
        ):

            async def sqlite_raw() -> str:
                return await asyncio.to_thread(_sqlite_text, settings.data_dir / DATABASE_FILE)

            yield Store(Caller(client), sqlite_raw)
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
            AsyncClient(f"127.0.0.1:{server.port}") as engram,
        ):

            async def mongo_raw() -> str:
                parts: list[str] = []
                for collection in await database.list_collection_names():
                    async for document in database[collection].find({}):
                        parts.append(repr(document))
                return "\n".join(parts)

            yield Store(Caller(engram), mongo_raw)
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


async def write(
    caller: Caller, path: str, content: str, *, ref: Space = NOTES, who: str = MEMBER
) -> None:
    await caller(who, ref).write_document(path, content)


async def usage(caller: Caller, ref: Space = NOTES) -> Usage:
    return await caller(MEMBER, ref).get_usage()


async def export_text(caller: Caller, ref: Space = NOTES) -> str:
    data = b"".join([chunk async for chunk in caller(ADMIN, ref).export_chunks()])
    texts: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            extracted = archive.extractfile(member)
            if extracted is not None:
                texts.append(extracted.read().decode())
    return "\n".join(texts)


# --- PurgeDocument ---------------------------------------------------------------------------


async def test_purge_erases_the_document_and_every_version(store: Store) -> None:
    caller, secret = store.caller, marker()
    await write(caller, "a.md", f"first {secret}\n")
    await write(caller, "a.md", f"second {secret}\n")
    await write(caller, "a.md", f"third {secret}!\n")
    await write(caller, "b.md", "unrelated\n")
    before = await usage(caller)
    size = len(f"third {secret}!\n")
    assert secret in await store.raw(), "the check below would prove nothing"

    result = await caller(ADMIN).purge_document("a.md")
    assert result.purged and result.versions_erased == 2 and result.refunded_bytes == size

    for version in (0, 1, 2, 3):
        with pytest.raises(NotFound):
            await caller(MEMBER).read_document("a.md", version=version)
    with pytest.raises(NotFound):
        await caller(MEMBER).list_document_versions("a.md")
    listed = await caller(MEMBER).list_documents(recursive=True)
    assert [entry.path for entry in listed.entries] == ["b.md"]
    assert secret not in await export_text(caller)
    assert "unrelated" in await export_text(caller)
    after = await usage(caller)
    assert after.used_bytes == before.used_bytes - size
    assert after.tenant_used_bytes == before.tenant_used_bytes - size
    assert secret not in await store.raw()

    again = await caller(ADMIN).purge_document("a.md")
    assert (again.purged, again.versions_erased, again.refunded_bytes) == (False, 0, 0)
    assert (await usage(caller)).used_bytes == after.used_bytes
    assert "memory.purge" in await store.raw(), "the audit row"


async def test_a_platform_admin_purges_in_any_tenant(store: Store) -> None:
    caller = store.caller
    await write(caller, "a.md", "acme's\n")
    result = await caller(PLATFORM, ACME_NOTES).purge_document("a.md")
    assert result.purged and result.refunded_bytes == len("acme's\n")
    assert (await usage(caller)).used_bytes == 0


async def test_erasures_leave_audit_rows_without_content(tmp_path: Path) -> None:
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    secret = marker()
    async with (
        embedded_engram(settings, require_auth=True) as engram,
        AsyncClient(f"127.0.0.1:{engram.port}") as client,
    ):
        caller = Caller(client)
        await write(caller, "a.md", f"{secret}\n")
        await write(caller, "b.md", "bee\n")
        await caller(ADMIN).purge_document("a.md")
        await caller(ADMIN).delete_space(confirm_space_id=NOTES_ID)
        listed = await caller(PLATFORM).list_audit_events()
    rows = [e for e in listed.items if e.action.startswith(("memory.purge", "memory.space"))]
    assert [(e.action, e.subject, e.tenant, e.space_id, e.path, e.bytes_delta) for e in rows] == [
        ("memory.purge", "root", "acme", NOTES_ID, "a.md", -len(f"{secret}\n")),
        ("memory.space_delete", "root", "acme", NOTES_ID, "", -len("bee\n")),
    ]
    assert all(e.at is not None for e in rows)
    assert secret not in repr(listed)


async def test_purge_erases_a_deleted_documents_kept_versions(store: Store) -> None:
    caller, secret = store.caller, marker()
    await write(caller, "gone.md", f"once {secret}\n")
    await caller(MEMBER).delete_document("gone.md")
    kept = await caller(MEMBER).list_document_versions("gone.md")
    assert kept.items, "a delete keeps the content as a version"

    result = await caller(ADMIN).purge_document("gone.md")
    assert result.purged and result.versions_erased == 1 and result.refunded_bytes == 0
    with pytest.raises(NotFound):
        await caller(MEMBER).read_document("gone.md", version=1)
    assert secret not in await store.raw()


async def test_a_purged_path_can_be_written_again_from_scratch(store: Store) -> None:
    caller, secret = store.caller, marker()
    await write(caller, "a.md", f"old {secret}\n")
    await write(caller, "a.md", f"older {secret}\n")
    await caller(ADMIN).purge_document("a.md")
    await write(caller, "a.md", "fresh\n")
    read = await caller(MEMBER).read_document("a.md")
    assert read.content == "fresh\n" and read.version == 1
    versions = await caller(MEMBER).list_document_versions("a.md")
    assert [v.current for v in versions.items] == [True]
    assert secret not in await store.raw()


async def test_only_admins_purge(store: Store) -> None:
    caller = store.caller
    await write(caller, "a.md", "keep me\n")
    for who in (MEMBER, SERVICE):
        ref = ACME_NOTES if who is SERVICE else NOTES
        with pytest.raises(PermissionDenied):
            await caller(who, ref).purge_document("a.md")
    # Another tenant's admin names their own tenant's space: nothing of acme's is touched.
    with pytest.raises(PermissionDenied):
        await caller(OTHER_ADMIN, ACME_NOTES).purge_document("a.md")
    with pytest.raises(InvalidArgument):
        await caller(ADMIN).purge_document("../x")
    read = await caller(MEMBER).read_document("a.md")
    assert read.content == "keep me\n"


# --- DeleteSpace -----------------------------------------------------------------------------


async def test_delete_space_erases_the_whole_space(store: Store) -> None:
    caller, secret = store.caller, marker()
    other = Space(name="keep")
    await write(caller, "a.md", f"a {secret}\n")
    await write(caller, "a.md", f"a2 {secret}\n")
    await write(caller, "dir/b.md", f"b {secret}\n")
    await write(caller, "c.md", f"c {secret}\n")
    await caller(MEMBER).delete_document("c.md")
    await write(caller, "x.md", "other space\n", ref=other)
    before = await usage(caller)
    assert before.used_bytes > 0

    with pytest.raises(InvalidArgument) as wrong:
        await caller(ADMIN).delete_space(confirm_space_id="notes")
    assert NOTES_ID in wrong.value.message, "the error names the id to confirm"
    assert (await usage(caller)).used_bytes == before.used_bytes, "refused: nothing erased"

    result = await caller(ADMIN).delete_space(confirm_space_id=NOTES_ID)
    assert result.space_id == NOTES_ID
    assert result.documents_erased == 3, "a.md, dir/b.md and the deleted c.md's versions"
    assert result.versions_erased == 2  # a.md's first version and c.md's deleted one
    assert result.refunded_bytes == before.used_bytes

    listed = await caller(MEMBER).list_documents(recursive=True)
    assert list(listed.entries) == []
    for path in ("a.md", "dir/b.md", "c.md"):
        with pytest.raises(NotFound):
            await caller(MEMBER).list_document_versions(path)
    assert secret not in await export_text(caller)
    after = await usage(caller)
    assert after.used_bytes == 0 and after.document_count == 0
    assert after.tenant_used_bytes == before.tenant_used_bytes - before.used_bytes
    assert (await usage(caller, other)).used_bytes == len("other space\n")
    assert secret not in await store.raw()
    assert "other space" in await store.raw()
    assert "memory.space_delete" in await store.raw(), "the audit row"
    spaces = await caller(MEMBER).list_spaces()
    assert [s.space_id for s in spaces.items] == ["v1:private:acme::::keep"]

    again = await caller(ADMIN).delete_space(confirm_space_id=NOTES_ID)
    assert (again.documents_erased, again.versions_erased, again.refunded_bytes) == (0, 0, 0)
    # The space is usable again.
    await write(caller, "a.md", "new life\n")
    assert (await usage(caller)).used_bytes == len("new life\n")


async def test_delete_space_racing_writes_leaves_a_consistent_space(store: Store) -> None:
    """Writes keep landing while the space is deleted: whatever survives is readable,
    writable and exactly what the quota counts (no charge lost or refunded twice)."""
    caller = store.caller
    paths = [f"p{i}.md" for i in range(4)]
    for path in paths:
        await write(caller, path, f"{path} before\n")

    async def writer(n: int) -> None:
        for round_ in range(15):
            path = paths[(n + round_) % len(paths)]
            with contextlib.suppress(EngramError):  # Conflict (ABORTED) after a lost race
                await write(caller, path, f"{path} by {n} round {round_} " + "x" * round_)

    async def deleter() -> None:
        await asyncio.sleep(0.05)
        await caller(ADMIN).delete_space(confirm_space_id=NOTES_ID)

    await asyncio.gather(writer(0), writer(1), deleter())
    listed = await caller(MEMBER).list_documents(recursive=True)
    stored = sum(entry.size_bytes for entry in listed.entries)
    assert (await usage(caller)).used_bytes == stored
    for path in paths:
        await write(caller, path, "after\n")
    assert (await usage(caller)).used_bytes == len("after\n") * len(paths)


async def test_only_admins_delete_spaces(store: Store) -> None:
    caller = store.caller
    await write(caller, "a.md", "keep me\n")
    with pytest.raises(PermissionDenied):
        await caller(MEMBER).delete_space(confirm_space_id=NOTES_ID)
    with pytest.raises(PermissionDenied):
        await caller(SERVICE, ACME_NOTES).delete_space(confirm_space_id=NOTES_ID)
    global_ref = Space(visibility="global", name="shared")
    await write(caller, "g.md", "global\n", ref=global_ref, who=PLATFORM)
    global_id = "v1:global:::::shared"
    with pytest.raises(PermissionDenied):
        await caller(ADMIN, global_ref).delete_space(confirm_space_id=global_id)
    assert (await usage(caller)).used_bytes == len("keep me\n")
    deleted = await caller(PLATFORM, global_ref).delete_space(confirm_space_id=global_id)
    assert deleted.documents_erased == 1


# --- ListSpaces ------------------------------------------------------------------------------


async def test_list_spaces_pages_through_a_tenants_spaces(store: Store) -> None:
    caller = store.caller
    started = datetime.now(UTC).replace(microsecond=0)
    for name, files in (("alpha", 1), ("beta", 2), ("gamma", 3)):
        for i in range(files):
            await write(caller, f"{i}.md", "x" * (10 + i), ref=Space(name=name))
    await write(caller, "a.md", "globex's\n", ref=Space(name="alpha"), who=OTHER_ADMIN)

    member = caller(MEMBER)
    first = await member.list_spaces(page_size=2)
    assert [s.space.name for s in first.items] == ["alpha", "beta"] and first.next_page_token
    second = await member.list_spaces(page_size=2, page_token=first.next_page_token)
    assert [s.space.name for s in second.items] == ["gamma"] and not second.next_page_token
    gamma = second.items[0]
    assert gamma.space_id == "v1:private:acme::::gamma" and gamma.space.tenant == "acme"
    assert gamma.document_count == 3 and gamma.used_bytes == 10 + 11 + 12
    assert gamma.last_write_at is not None and gamma.last_write_at >= started

    # Another tenant: refused to a tenant admin, shown to a platform admin.
    with pytest.raises(PermissionDenied):
        await caller(ADMIN).list_spaces(tenant="globex")
    theirs = await caller(PLATFORM).list_spaces(tenant="globex")
    assert [s.space_id for s in theirs.items] == ["v1:private:globex::::alpha"]
    with pytest.raises(InvalidArgument):
        await member.list_spaces(page_size=-1)
    with pytest.raises(InvalidArgument):
        await caller(PLATFORM).list_spaces(tenant="globex", page_token=first.next_page_token)


async def test_list_spaces_global(store: Store) -> None:
    caller = store.caller
    global_ref = Space(visibility="global", name="handbook")
    await write(caller, "h.md", "for everyone\n", ref=global_ref, who=PLATFORM)
    for who in (MEMBER, OTHER_ADMIN):
        listed = await caller(who).list_spaces(global_spaces=True)
        assert [s.space_id for s in listed.items] == ["v1:global:::::handbook"]
    with pytest.raises(InvalidArgument):
        await caller(MEMBER).list_spaces(tenant="acme", global_spaces=True)


async def test_sqlite_file_keeps_no_byte_of_a_purged_document(tmp_path: Path) -> None:
    """Not only the tables: the freed pages of the database file are zeroed too (large
    documents live in overflow pages, which a plain delete leaves on the free list when the
    SQLite build does not default to secure_delete; Debian's does)."""
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    secret = marker()
    async with (
        embedded_engram(settings, require_auth=True) as engram,
        AsyncClient(f"127.0.0.1:{engram.port}") as client,
    ):
        caller = Caller(client)
        await write(caller, "big.md", f"{secret} " * 2000)
        await write(caller, "big.md", f"{secret}! " * 2000)
        await write(caller, "small.md", f"{secret}\n")
        await write(caller, "other.md", "stays\n" * 500)
        await caller(ADMIN).purge_document("big.md")
        await caller(ADMIN).purge_document("small.md")
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
