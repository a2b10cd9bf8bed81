"""The DocumentSource contract, run against every adapter: the embedded repository
(SQLite), the MongoDB repository (FerretDB), and StorageService over gRPC as a service
principal (listing a space through ListDocuments, every space through ListAllDocuments:
the production indexer reads nothing of storage's database)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from engram.app.config import Components
from engram.app.embedded import build_core, embedded_engram
from engram.authz.tokens import JwtVerifier, TokenAuthenticator
from engram.backends.mongo import connect
from engram.domain.errors import InvalidArgument, PermissionDenied
from engram.domain.principals import LOCAL_ADMIN, MAINTENANCE
from engram.domain.spaces import SpaceRef, parse_space_id
from engram.indexer.sources import (
    DocumentSource,
    RepositoryDocumentSource,
    StorageClientDocumentSource,
)
from engram.quota.service import QuotaService
from engram.storage.mongo_repository import MongoDocumentRepository
from engram.storage.service import StorageService, WriteMode
from tests.support.backends import RealBackends
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, service_token

pytestmark = pytest.mark.contract

NOTES = parse_space_id("v1:private:local::::notes")
OTHER = parse_space_id("v1:project:local:p1:::shared")


@dataclass
class Subject:
    source: DocumentSource
    storage: StorageService


class _NoEvents:
    def changed(self) -> None:
        """The contract needs no events."""


@contextlib.asynccontextmanager
async def sqlite_subject(tmp_path: Path) -> AsyncIterator[Subject]:
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(server_settings(tmp_path / "core"), stack)
        yield Subject(RepositoryDocumentSource(core.repository), core.storage)


@contextlib.asynccontextmanager
async def mongo_subject(tmp_path: Path, backends: RealBackends) -> AsyncIterator[Subject]:
    from engram.authz.enforcement import PolicyAuthorizer
    from engram.quota.mongo_ledger import MongoUsageLedger

    settings = server_settings(tmp_path)
    client, database = connect(backends.url("mongo"), f"sources_{uuid.uuid4().hex[:10]}")
    try:
        repository = MongoDocumentRepository(database, retention=5)
        await repository.ensure_indexes()

        class _Audit:
            async def record(self, entry: object) -> None:
                """Global writes are not part of this contract."""

        storage = StorageService(
            repository,
            QuotaService(
                MongoUsageLedger(database),
                Components.from_settings(settings).quotas,
                repository,
                authorizer=PolicyAuthorizer(),
            ),
            PolicyAuthorizer(),
            _Audit(),
            _NoEvents(),
            Components.from_settings(settings).limits,
        )
        yield Subject(RepositoryDocumentSource(repository), storage)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def grpc_subject(tmp_path: Path) -> AsyncIterator[Subject]:
    authenticator = TokenAuthenticator(
        JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None), None, cache_seconds=0
    )
    async with embedded_engram(
        server_settings(tmp_path / "server"), authenticator=authenticator
    ) as engram:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel:
            source = StorageClientDocumentSource(channel, service_token())
            yield Subject(source, engram.storage)


@pytest.fixture(params=["sqlite", "mongo", "grpc"])
async def subject(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Subject]:
    if request.param == "sqlite":
        opened = sqlite_subject(tmp_path)
    elif request.param == "mongo":
        opened = mongo_subject(tmp_path, real_backends)
    else:
        opened = grpc_subject(tmp_path)
    async with opened as ready:
        yield ready


async def write(subject: Subject, space: SpaceRef, path: str, content: str) -> None:
    await subject.storage.write(LOCAL_ADMIN, space, path, content, mode=WriteMode.REPLACE)


async def listed(source: DocumentSource, space_id: str | None) -> list[tuple[str, str]]:
    return [(space.id, path) async for space, path in source.documents(space_id)]


async def test_current_is_the_stored_document_or_none(subject: Subject) -> None:
    await write(subject, NOTES, "a.md", "first")
    await write(subject, NOTES, "a.md", "second")
    document = await subject.source.current(NOTES, "a.md")
    assert document is not None
    assert (document.content, document.version, document.path) == ("second", 2, "a.md")
    assert document.space == NOTES and document.space_id == NOTES.id
    assert document.sha256 and document.document_id and document.size_bytes == 6
    assert await subject.source.current(NOTES, "missing.md") is None
    await subject.storage.delete(LOCAL_ADMIN, NOTES, "a.md")
    assert await subject.source.current(NOTES, "a.md") is None
    await write(subject, NOTES, "a.md", "again")
    reborn = await subject.source.current(NOTES, "a.md")
    assert reborn is not None and reborn.document_id != document.document_id


async def test_documents_lists_live_documents_by_space(subject: Subject) -> None:
    for path in ("b.md", "a.md", "dir/c.md", "dir/sub/d.md", "gone.md"):
        await write(subject, NOTES, path, f"content of {path}")
    await write(subject, OTHER, "x.md", "other space")
    await subject.storage.delete(LOCAL_ADMIN, NOTES, "gone.md")
    assert await listed(subject.source, NOTES.id) == [
        (NOTES.id, p) for p in ("a.md", "b.md", "dir/c.md", "dir/sub/d.md")
    ]
    assert await listed(subject.source, OTHER.id) == [(OTHER.id, "x.md")]
    everything = await listed(subject.source, None)
    assert everything == sorted(
        [(NOTES.id, p) for p in ("a.md", "b.md", "dir/c.md", "dir/sub/d.md")] + [(OTHER.id, "x.md")]
    )


async def test_storage_lists_every_document_a_page_at_a_time(subject: Subject) -> None:
    """ListAllDocuments' use case, on each repository: pages in (space_id, path) order,
    deleted documents left out, services only."""
    for i in range(11):
        await write(subject, NOTES if i % 2 else OTHER, f"n{i:02d}.md", str(i))
    await subject.storage.delete(LOCAL_ADMIN, NOTES, "n03.md")
    pages, token, seen = 0, "", []
    while True:
        page = await subject.storage.list_all_documents(MAINTENANCE, page_size=4, page_token=token)
        assert len(page.items) <= 4
        seen += page.items
        pages, token = pages + 1, page.next_page_token
        if not token:
            break
    expected = sorted((OTHER.id if i % 2 == 0 else NOTES.id, f"n{i:02d}.md") for i in range(11))
    expected.remove((NOTES.id, "n03.md"))
    assert seen == expected and pages == 3
    with pytest.raises(PermissionDenied, match="engram's services"):
        await subject.storage.list_all_documents(LOCAL_ADMIN, page_size=0, page_token="")
    with pytest.raises(InvalidArgument):
        await subject.storage.list_all_documents(MAINTENANCE, page_size=-1, page_token="")
    with pytest.raises(InvalidArgument):
        await subject.storage.list_all_documents(MAINTENANCE, page_size=4, page_token="junk")


@pytest.mark.parametrize("backend", ["sqlite", "mongo"])
async def test_repositories_page_through_many_paths(
    backend: str, tmp_path: Path, real_backends: RealBackends
) -> None:
    opened = (
        sqlite_subject(tmp_path) if backend == "sqlite" else mongo_subject(tmp_path, real_backends)
    )
    async with opened as subject:
        for i in range(25):
            await write(subject, NOTES if i % 2 else OTHER, f"n{i:02d}.md", str(i))
        await subject.storage.delete(LOCAL_ADMIN, NOTES, "n03.md")
        assert isinstance(subject.source, RepositoryDocumentSource)
        repository = subject.source._repository
        paged = [item async for item in repository.iter_paths(None, page_size=4)]
        assert len(paged) == 24 and paged == sorted(paged)
        mine = [item async for item in repository.iter_paths(NOTES.id, page_size=3)]
        assert mine == [(NOTES.id, f"n{i:02d}.md") for i in range(1, 25, 2) if i != 3]
