"""StorageService contract: every rule of ARCHITECTURE §3, over gRPC, on every backend.

The same tests run against the embedded SQLite repository and the MongoDB repository (on
the real MongoDB-protocol server from deploy/local).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.stacks import BACKENDS, storage_server

pytestmark = pytest.mark.contract

Stub = storage_pb2_grpc.StorageServiceStub
StubFactory = Callable[..., AbstractAsyncContextManager[Stub]]
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture(params=BACKENDS)
def stub_factory(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> StubFactory:
    backend = request.param
    if backend != "sqlite":
        request.applymarker(pytest.mark.real_backend)

    def open_stub(**overrides: Any) -> AbstractAsyncContextManager[Stub]:
        return _stub(backend, tmp_path, real_backends, overrides)

    return open_stub


async def _stub_gen(
    backend: str, tmp_path: Path, real_backends: RealBackends, overrides: dict[str, Any]
) -> AsyncIterator[Stub]:
    async with storage_server(backend, tmp_path, real_backends, **overrides) as port:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Stub(channel)


def _stub(
    backend: str, tmp_path: Path, real_backends: RealBackends, overrides: dict[str, Any]
) -> AbstractAsyncContextManager[Stub]:
    from contextlib import asynccontextmanager

    return asynccontextmanager(_stub_gen)(backend, tmp_path, real_backends, overrides)


@pytest.fixture
async def stub(stub_factory: StubFactory) -> AsyncIterator[Stub]:
    async with stub_factory() as opened:
        yield opened


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def read(stub: Stub, path: str, **fields: Any) -> storage_pb2.ReadDocumentResponse:
    return await stub.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=fields.pop("ref", space()), path=path, **fields)
    )


# --- write and read --------------------------------------------------------------------------


async def test_write_creates_version_1_and_read_returns_it(stub: Stub) -> None:
    content = "# Memory\n\nThe user likes tea.\n"
    written = await stub.WriteDocument(write_request("MEMORY.md", content))
    assert written.created and written.bytes_delta == len(content)
    doc = written.document
    assert doc.version == 1 and doc.sha256 == sha(content) and doc.size_bytes == len(content)
    assert doc.content == "", "write responses omit the content"
    assert doc.document_id and doc.space_id == "v1:private:local::::notes"
    assert doc.space.tenant == "local", "the tenant is stamped from the identity"
    got = (await read(stub, "MEMORY.md")).document
    assert got.content == content and got.word_count == 6 and got.updated_by == "local-admin"
    assert got.created_at == got.updated_at


async def test_replace_bumps_version_keeps_identity(stub: Stub) -> None:
    first = (await stub.WriteDocument(write_request("a.md", "one"))).document
    second = await stub.WriteDocument(write_request("a.md", "three"))
    assert not second.created and second.bytes_delta == 2
    assert second.document.version == 2
    assert second.document.document_id == first.document_id
    got = (await read(stub, "a.md")).document
    assert got.created_at == first.created_at
    assert got.updated_at.ToDatetime() >= first.updated_at.ToDatetime()


async def test_identical_write_changes_nothing(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "same"))
    again = await stub.WriteDocument(write_request("a.md", "same"))
    assert again.document.version == 1 and again.bytes_delta == 0 and not again.created


async def test_append_creates_then_appends(stub: Stub) -> None:
    append = storage_pb2.WRITE_MODE_APPEND
    created = await stub.WriteDocument(write_request("log.md", "a\n", mode=append))
    assert created.created and created.document.version == 1
    await stub.WriteDocument(write_request("log.md", "b\n", mode=append))
    assert (await read(stub, "log.md")).document.content == "a\nb\n"
    await fails(stub.WriteDocument(write_request("log.md", "", mode=append)), INVALID)


async def test_an_append_as_a_line_starts_one_and_a_created_document_gets_its_prefix(
    stub: Stub,
) -> None:
    def line(text: str) -> storage_pb2.WriteDocumentRequest:
        return write_request(
            "daily.md",
            text,
            mode=storage_pb2.WRITE_MODE_APPEND,
            append_as_line=True,
            prefix_if_created="# Log\n\n",
        )

    created = await stub.WriteDocument(line("a\n"))
    assert created.created and created.bytes_delta == len("# Log\n\na\n")
    await stub.WriteDocument(line("b\n"))
    assert (await read(stub, "daily.md")).document.content == "# Log\n\na\nb\n"
    # Someone leaves the document without a final newline: the next line starts its own.
    await stub.WriteDocument(write_request("daily.md", "note", mode=storage_pb2.WRITE_MODE_APPEND))
    joined = await stub.WriteDocument(line("c\n"))
    assert joined.bytes_delta == len("\nc\n") and not joined.created
    assert (await read(stub, "daily.md")).document.content == "# Log\n\na\nb\nnote\nc\n"
    await fails(
        stub.WriteDocument(write_request("x.md", "y", append_as_line=True)),
        INVALID,
    )


async def test_racing_line_appends_to_a_new_document_keep_one_prefix_and_every_line(
    stub: Stub,
) -> None:
    lines = [f"entry {i}\n" for i in range(12)]
    await asyncio.gather(
        *(
            stub.WriteDocument(
                write_request(
                    "race.md",
                    text,
                    mode=storage_pb2.WRITE_MODE_APPEND,
                    append_as_line=True,
                    prefix_if_created="# Race\n\n",
                )
            )
            for text in lines
        )
    )
    content = (await read(stub, "race.md")).document.content
    assert content.startswith("# Race\n\n") and content.count("# Race") == 1
    assert sorted(content.removeprefix("# Race\n\n").splitlines()) == sorted(
        text.strip() for text in lines
    )


async def test_read_missing_is_not_found(stub: Stub) -> None:
    await fails(read(stub, "nope.md"), grpc.StatusCode.NOT_FOUND, "DOCUMENT_NOT_FOUND")


async def test_spaces_are_separate(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "in notes"))
    other = space("other")
    await fails(read(stub, "a.md", ref=other), grpc.StatusCode.NOT_FOUND)
    await stub.WriteDocument(write_request("a.md", "in other", ref=other))
    assert (await read(stub, "a.md")).document.content == "in notes"


# --- etags -----------------------------------------------------------------------------------


async def test_expected_sha256_guards_replace(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "v1"))
    failure = await fails(
        stub.WriteDocument(write_request("a.md", "v2", expected_sha256=sha("stale"))),
        grpc.StatusCode.ABORTED,
        "ETAG_MISMATCH",
    )
    assert sha("v1") in failure.message, "the message carries the current sha256"
    assert failure.metadata["current_sha256"] == sha("v1")
    precondition = failure.detail(error_details_pb2.PreconditionFailure)
    assert precondition.violations[0].subject == "a.md"
    ok = await stub.WriteDocument(write_request("a.md", "v2", expected_sha256=sha("v1")))
    assert ok.document.version == 2


async def test_expected_sha256_on_absent_document_aborts(stub: Stub) -> None:
    await fails(
        stub.WriteDocument(write_request("new.md", "x", expected_sha256=sha("anything"))),
        grpc.StatusCode.ABORTED,
    )


async def test_create_only(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "x", create_only=True))
    await fails(
        stub.WriteDocument(write_request("a.md", "y", create_only=True)), grpc.StatusCode.ABORTED
    )


@pytest.mark.parametrize("bad", ["abc", "G" * 64, sha("x").upper(), sha("x") + "0"])
async def test_malformed_expected_sha256_is_invalid(stub: Stub, bad: str) -> None:
    await fails(stub.WriteDocument(write_request("a.md", "x", expected_sha256=bad)), INVALID)


async def test_concurrent_etag_writers_have_exactly_one_winner(stub: Stub) -> None:
    await stub.WriteDocument(write_request("race.md", "base"))
    base = sha("base")

    async def contender(i: int) -> grpc.StatusCode:
        try:
            await stub.WriteDocument(write_request("race.md", f"by {i}", expected_sha256=base))
        except grpc.aio.AioRpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(contender(i) for i in range(20)))
    assert codes.count(grpc.StatusCode.OK) == 1
    assert codes.count(grpc.StatusCode.ABORTED) == 19
    assert (await read(stub, "race.md")).document.version == 2


async def test_fifty_concurrent_appenders_lose_nothing(stub: Stub) -> None:
    lines = [f"entry {i:02d}\n" for i in range(50)]
    await asyncio.gather(
        *(
            stub.WriteDocument(write_request("daily.md", line, mode=storage_pb2.WRITE_MODE_APPEND))
            for line in lines
        )
    )
    doc = (await read(stub, "daily.md")).document
    assert sorted(doc.content.splitlines(keepends=True)) == lines
    assert doc.version == 50


# --- delete and history ----------------------------------------------------------------------


async def test_delete(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "12345"))
    await fails(
        stub.DeleteDocument(
            storage_pb2.DeleteDocumentRequest(
                space=space(), path="a.md", expected_sha256=sha("other")
            )
        ),
        grpc.StatusCode.ABORTED,
    )
    deleted = await stub.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=space(), path="a.md")
    )
    assert deleted.deleted_bytes == 5
    await fails(read(stub, "a.md"), grpc.StatusCode.NOT_FOUND)
    await fails(
        stub.DeleteDocument(storage_pb2.DeleteDocumentRequest(space=space(), path="a.md")),
        grpc.StatusCode.NOT_FOUND,
    )


async def test_versions_are_kept_readable_and_restorable(stub: Stub) -> None:
    for text in ("first", "second", "third"):
        await stub.WriteDocument(write_request("m.md", text))
    listed = await stub.ListDocumentVersions(
        storage_pb2.ListDocumentVersionsRequest(space=space(), path="m.md")
    )
    assert [v.version for v in listed.versions] == [3, 2, 1]
    assert listed.versions[0].current and not listed.versions[1].current
    assert [v.sha256 for v in listed.versions] == [sha("third"), sha("second"), sha("first")]
    old = (await read(stub, "m.md", version=1)).document
    assert old.content == "first" and old.version == 1
    restored = await stub.WriteDocument(write_request("m.md", old.content))
    assert restored.document.version == 4
    assert (await read(stub, "m.md")).document.content == "first"
    await fails(read(stub, "m.md", version=99), grpc.StatusCode.NOT_FOUND, "VERSION_NOT_FOUND")
    await fails(read(stub, "m.md", version=-1), INVALID)


async def test_delete_keeps_history_so_it_can_be_undone(stub: Stub) -> None:
    first = (await stub.WriteDocument(write_request("gone.md", "precious"))).document
    await stub.DeleteDocument(storage_pb2.DeleteDocumentRequest(space=space(), path="gone.md"))
    listed = await stub.ListDocumentVersions(
        storage_pb2.ListDocumentVersionsRequest(space=space(), path="gone.md")
    )
    assert [(v.version, v.deleted) for v in listed.versions] == [(1, True)]
    assert (await read(stub, "gone.md", version=1)).document.content == "precious"
    again = (await stub.WriteDocument(write_request("gone.md", "new life"))).document
    assert again.version == 1 and again.document_id != first.document_id


async def test_version_retention(stub_factory: StubFactory) -> None:
    async with stub_factory(version_retention=3) as stub:
        for i in range(8):
            await stub.WriteDocument(write_request("r.md", f"v{i}"))
        listed = await stub.ListDocumentVersions(
            storage_pb2.ListDocumentVersionsRequest(space=space(), path="r.md")
        )
        assert [v.version for v in listed.versions] == [8, 7, 6, 5]


async def test_versions_paginate(stub: Stub) -> None:
    for i in range(12):
        await stub.WriteDocument(write_request("p.md", f"v{i}"))
    seen: list[int] = []
    token = ""
    while True:
        page = await stub.ListDocumentVersions(
            storage_pb2.ListDocumentVersionsRequest(
                space=space(), path="p.md", page_size=5, page_token=token
            )
        )
        seen += [v.version for v in page.versions]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(range(12, 0, -1))


# --- listing ---------------------------------------------------------------------------------


async def _write_all(stub: Stub, paths: list[str], ref: space_pb2.SpaceRef | None = None) -> None:
    for path in paths:
        await stub.WriteDocument(write_request(path, f"content of {path}", ref=ref))


async def test_list_root_and_directories(stub: Stub) -> None:
    await _write_all(
        stub,
        [
            "MEMORY.md",
            "daily/2026-01-01.md",
            "daily/2026-01-02.md",
            "notes/a.md",
            "notes/deep/b.md",
            "notes0.md",
        ],
    )
    root = await stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space()))
    assert [(e.path, e.is_dir) for e in root.entries] == [
        ("MEMORY.md", False),
        ("daily", True),
        ("notes", True),
        ("notes0.md", False),
    ]
    notes = await stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space(), dir="notes"))
    assert [(e.path, e.is_dir) for e in notes.entries] == [
        ("notes/a.md", False),
        ("notes/deep", True),
    ]
    deep = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), dir="notes", recursive=True)
    )
    assert [e.path for e in deep.entries] == ["notes/a.md", "notes/deep/b.md"]
    assert deep.entries[0].size_bytes == len("content of notes/a.md")
    everything = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), recursive=True)
    )
    assert len(everything.entries) == 6
    await fails(
        stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space(), dir="notes/")), INVALID
    )


async def test_list_pages_through_everything_once_in_order(stub: Stub) -> None:
    paths = sorted([f"d{i % 3}/f{i:03d}.md" for i in range(60)] + [f"top{i}.md" for i in range(7)])
    await _write_all(stub, paths)
    for recursive, expected in (
        (True, paths),
        (False, ["d0", "d1", "d2"] + [p for p in paths if "/" not in p]),
    ):
        seen: list[str] = []
        token = ""
        while True:
            page = await stub.ListDocuments(
                storage_pb2.ListDocumentsRequest(
                    space=space(), recursive=recursive, page_size=4, page_token=token
                )
            )
            assert len(page.entries) <= 4
            seen += [e.path for e in page.entries]
            token = page.next_page_token
            if not token:
                break
        assert seen == expected


async def test_page_size_rules(stub: Stub) -> None:
    await _write_all(stub, [f"f{i}.md" for i in range(3)])
    await fails(
        stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space(), page_size=-1)), INVALID
    )
    huge = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), page_size=10**6)
    )
    assert len(huge.entries) == 3 and not huge.next_page_token


async def test_page_token_is_bound_to_its_listing(stub: Stub) -> None:
    await _write_all(stub, [f"f{i}.md" for i in range(5)])
    page = await stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space(), page_size=2))
    assert page.next_page_token
    for request in (
        storage_pb2.ListDocumentsRequest(space=space("other"), page_token=page.next_page_token),
        storage_pb2.ListDocumentsRequest(
            space=space(), recursive=True, page_token=page.next_page_token
        ),
        storage_pb2.ListDocumentsRequest(space=space(), page_token="garbage!"),
    ):
        await fails(stub.ListDocuments(request), INVALID, "INVALID_PAGE_TOKEN")


# --- usage -----------------------------------------------------------------------------------


async def test_usage_tracks_bytes_and_documents(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "x" * 100))
    await stub.WriteDocument(write_request("b.md", "y" * 50))
    await stub.WriteDocument(write_request("a.md", "x" * 10))
    await stub.WriteDocument(write_request("c.md", "z" * 7, ref=space("other")))
    usage = await stub.GetUsage(storage_pb2.GetUsageRequest(space=space()))
    assert usage.used_bytes == 60 and usage.document_count == 2
    assert usage.quota_bytes == 64 * 1024 * 1024
    assert usage.tenant_used_bytes == 67 and usage.tenant_quota_bytes == 1024**3
    await stub.DeleteDocument(storage_pb2.DeleteDocumentRequest(space=space(), path="b.md"))
    usage = await stub.GetUsage(storage_pb2.GetUsageRequest(space=space()))
    assert usage.used_bytes == 10 and usage.document_count == 1


async def test_sub_cap_refuses_growth_with_quota_failure(stub_factory: StubFactory) -> None:
    async with stub_factory(quota_private=100) as stub:
        await stub.WriteDocument(write_request("a.md", "x" * 90))
        failure = await fails(
            stub.WriteDocument(write_request("b.md", "y" * 11)),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "QUOTA_EXCEEDED",
        )
        assert failure.metadata["limit"] == "space_subcap"
        assert failure.metadata["limit_bytes"] == "100"
        assert failure.metadata["used_bytes"] == "90"
        quota = failure.detail(error_details_pb2.QuotaFailure)
        assert quota.violations[0].subject.startswith("space_subcap:")
        await fails(read(stub, "b.md"), grpc.StatusCode.NOT_FOUND)
        shrink = await stub.WriteDocument(write_request("a.md", "x"))
        assert shrink.bytes_delta == -89
        await stub.WriteDocument(write_request("b.md", "y" * 99))


async def test_tenant_total_zero_refuses_growth(stub_factory: StubFactory) -> None:
    async with stub_factory(quota_tenant_total=0) as stub:
        failure = await fails(
            stub.WriteDocument(write_request("a.md", "x")), grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        assert failure.metadata["limit"] == "tenant_total"


# --- bad input -------------------------------------------------------------------------------


NON_CANONICAL = [
    ("./MEMORY.md", "MEMORY.md"),
    ("a//b.md", "a/b.md"),
    ("/x.md", "x.md"),
    ("a/./b.md", "a/b.md"),
    ("x.md/", "x.md"),
    ("a\\b.md", "a/b.md"),
    ("cafe\u0301.md", "caf\u00e9.md"),
]


@pytest.mark.parametrize(("path", "canonical"), NON_CANONICAL)
async def test_non_canonical_paths_are_refused_naming_the_canonical_form(
    stub: Stub, path: str, canonical: str
) -> None:
    failure = await fails(stub.WriteDocument(write_request(path, "x")), INVALID, "INVALID_PATH")
    assert f'use "{canonical}"' in failure.message
    bad_request = failure.detail(error_details_pb2.BadRequest)
    assert bad_request.field_violations[0].field == "path"
    await fails(read(stub, path), INVALID)


@pytest.mark.parametrize(
    "path", ["", "../up.md", "notes.txt", "a\x00.md", "a\x01.md", "x" * 600 + ".md"]
)
async def test_other_bad_paths(stub: Stub, path: str) -> None:
    await fails(stub.WriteDocument(write_request(path, "x")), INVALID, "INVALID_PATH")


@pytest.mark.parametrize(
    "ref",
    [
        space_pb2.SpaceRef(name="n"),
        space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE),
        space(project="p"),
        space(bot="b"),
        space(user="u"),
        space(visibility=space_pb2.VISIBILITY_PROJECT),
        space(visibility=space_pb2.VISIBILITY_PROJECT, project="p", bot="b"),
        space(visibility=space_pb2.VISIBILITY_BOT, project="p"),
        space(visibility=space_pb2.VISIBILITY_ORG, user="u"),
        space("a/b"),
        space("a:b"),
        space(".."),
        space(visibility=space_pb2.VISIBILITY_GLOBAL, tenant="local"),
    ],
)
async def test_bad_space_refs_are_refused(stub: Stub, ref: space_pb2.SpaceRef) -> None:
    await fails(
        stub.WriteDocument(write_request("a.md", "x", ref=ref)), INVALID, "INVALID_SPACE_REF"
    )
    await fails(stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=ref)), INVALID)


async def test_oversize_content(stub_factory: StubFactory) -> None:
    async with stub_factory(max_doc_bytes=1000) as stub:
        await stub.WriteDocument(write_request("a.md", "x" * 1000))
        failure = await fails(
            stub.WriteDocument(write_request("b.md", "x" * 1001)), INVALID, "CONTENT_TOO_LARGE"
        )
        assert "1001" in failure.message
        await fails(
            stub.WriteDocument(write_request("a.md", "y", mode=storage_pb2.WRITE_MODE_APPEND)),
            INVALID,
            "CONTENT_TOO_LARGE",
        )
        assert (await read(stub, "a.md")).document.size_bytes == 1000


async def test_zero_max_doc_bytes_refuses_non_empty(stub_factory: StubFactory) -> None:
    async with stub_factory(max_doc_bytes=0) as stub:
        await stub.WriteDocument(write_request("empty.md", ""))
        await fails(stub.WriteDocument(write_request("a.md", "x")), INVALID, "CONTENT_TOO_LARGE")


async def test_default_cap_is_two_mebibytes(stub: Stub) -> None:
    limit = 2 * 1024 * 1024
    await stub.WriteDocument(write_request("big.md", "x" * limit))
    await fails(stub.WriteDocument(write_request("big2.md", "x" * (limit + 1))), INVALID)


async def test_secret_shaped_content_is_refused_without_echo(stub: Stub) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    failure = await fails(
        stub.WriteDocument(write_request("a.md", f"token: {secret}")), INVALID, "SECRET_IN_CONTENT"
    )
    assert "GitHub token" in failure.message and secret not in failure.message
    await stub.WriteDocument(write_request("log.md", "ok\n"))
    await fails(
        stub.WriteDocument(
            write_request("log.md", f"{secret}\n", mode=storage_pb2.WRITE_MODE_APPEND)
        ),
        INVALID,
    )
    assert (await read(stub, "log.md")).document.content == "ok\n"


# --- export and import -----------------------------------------------------------------------


async def export_bytes(stub: Stub, ref: space_pb2.SpaceRef) -> bytes:
    chunks = [c.data async for c in stub.ExportSpace(storage_pb2.ExportSpaceRequest(space=ref))]
    return b"".join(chunks)


def untar(data: bytes) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar if m.isfile()}  # type: ignore[union-attr]


def make_tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def import_tar(
    stub: Stub,
    data: bytes,
    strategy: int,
    ref: space_pb2.SpaceRef | None = None,
    *,
    skip_unsupported: bool = False,
) -> storage_pb2.ImportSpaceResponse:
    async def messages() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
        yield storage_pb2.ImportSpaceRequest(
            space=ref or space(),
            strategy=strategy,  # type: ignore[arg-type]
            skip_unsupported=skip_unsupported,
        )
        for start in range(0, len(data), 1000):
            yield storage_pb2.ImportSpaceRequest(data=data[start : start + 1000])

    return await stub.ImportSpace(messages())


async def test_export_streams_every_document(stub: Stub) -> None:
    docs = {f"dir{i % 4}/doc{i}.md": f"# {i}\n" + "lorem ipsum " * i for i in range(300)}
    # Large documents among them: read a few MiB at a time (byte-bounded groups), none lost.
    docs |= {f"dir{i}/large.md": f"{i} " + "word " * 300_000 for i in range(5)}
    for path, content in docs.items():
        await stub.WriteDocument(write_request(path, content))
    assert untar(await export_bytes(stub, space())) == docs
    assert untar(await export_bytes(stub, space("empty"))) == {}


async def test_export_then_import_round_trips(stub: Stub) -> None:
    docs = {"MEMORY.md": "m", "daily/2026-01-01.md": "d", "é/ü.md": "unicode"}
    for path, content in docs.items():
        await stub.WriteDocument(write_request(path, content))
    result = await import_tar(
        stub, await export_bytes(stub, space()), storage_pb2.IMPORT_STRATEGY_SKIP, ref=space("copy")
    )
    assert result.written == 3 and result.bytes == sum(len(c.encode()) for c in docs.values())
    assert untar(await export_bytes(stub, space("copy"))) == docs


async def test_import_strategies(stub: Stub) -> None:
    await stub.WriteDocument(write_request("a.md", "old a"))
    await stub.WriteDocument(write_request("a-2.md", "taken"))
    await stub.WriteDocument(write_request("same.md", "same"))
    archive = make_tar({"a.md": b"new a", "b.md": b"new b", "same.md": b"same"})

    skipped = await import_tar(stub, archive, storage_pb2.IMPORT_STRATEGY_SKIP)
    assert (skipped.written, skipped.skipped, skipped.renamed) == (1, 1, 0)
    assert (await read(stub, "a.md")).document.content == "old a"

    renamed = await import_tar(stub, archive, storage_pb2.IMPORT_STRATEGY_RENAME)
    assert (renamed.written, renamed.renamed) == (1, 1)
    moved = next(e for e in renamed.entries if e.path == "a.md")
    assert moved.stored_path == "a-3.md", "RENAME never overwrites, not even a-2.md"
    assert (await read(stub, "a-2.md")).document.content == "taken"
    assert (await read(stub, "a-3.md")).document.content == "new a"
    unchanged = next(e for e in renamed.entries if e.path == "b.md")
    assert unchanged.outcome == storage_pb2.IMPORT_OUTCOME_UNCHANGED

    overwritten = await import_tar(stub, archive, storage_pb2.IMPORT_STRATEGY_OVERWRITE)
    assert overwritten.written == 1
    assert (await read(stub, "a.md")).document.content == "new a"
    assert (await read(stub, "a.md")).document.version == 2


async def test_import_skip_unsupported_reports_what_it_left_out(stub: Stub) -> None:
    await stub.WriteDocument(write_request("SOUL.md", "calm"))
    files = {
        "AGENTS.md": b"rules",
        "SOUL.md": b"calm",
        "BOOTSTRAP.md": b"first run",
        "HEARTBEAT.md": b"- check mail",
        "memory/2026-01-01.md": b"day",
        "avatar.png": b"\x89PNG",
        "TOOLS.md": b"tools",
    }
    archive = make_tar(files)
    await fails(import_tar(stub, archive, storage_pb2.IMPORT_STRATEGY_SKIP), INVALID)
    result = await import_tar(
        stub, archive, storage_pb2.IMPORT_STRATEGY_SKIP, skip_unsupported=True
    )
    outcome = {e.path: e.outcome for e in result.entries}
    assert [e.path for e in result.entries] == list(files), "archive order"
    assert outcome == {
        "AGENTS.md": storage_pb2.IMPORT_OUTCOME_CREATED,
        "SOUL.md": storage_pb2.IMPORT_OUTCOME_UNCHANGED,
        "BOOTSTRAP.md": storage_pb2.IMPORT_OUTCOME_UNSUPPORTED,
        "HEARTBEAT.md": storage_pb2.IMPORT_OUTCOME_UNSUPPORTED,
        "memory/2026-01-01.md": storage_pb2.IMPORT_OUTCOME_CREATED,
        "avatar.png": storage_pb2.IMPORT_OUTCOME_UNSUPPORTED,
        "TOOLS.md": storage_pb2.IMPORT_OUTCOME_CREATED,
    }
    details = {e.path: e.detail for e in result.entries if e.detail}
    assert set(details) == {"BOOTSTRAP.md", "HEARTBEAT.md", "avatar.png"}
    assert "Markdown" in details["avatar.png"] and "onboarding" in details["BOOTSTRAP.md"]
    assert (result.written, result.skipped, result.unsupported) == (3, 0, 3)
    assert result.bytes == len(b"rules") + len(b"day") + len(b"tools")
    listing = await stub.ListDocuments(
        storage_pb2.ListDocumentsRequest(space=space(), recursive=True)
    )
    assert [e.path for e in listing.entries] == [
        "AGENTS.md",
        "SOUL.md",
        "TOOLS.md",
        "memory/2026-01-01.md",
    ]


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ({"good.md": b"ok", "../escape.md": b"x"}, "INVALID_PATH"),
        ({"good.md": b"ok", "picture.png": b"x"}, "INVALID_PATH"),
        ({"good.md": b"ok", "huge.md": b"x" * 2001}, "CONTENT_TOO_LARGE"),
        ({"good.md": b"ok", "key.md": b"AKIAQ3EGUK5EXAMPLE7Z"}, "SECRET_IN_CONTENT"),
        ({"good.md": b"ok", "latin1.md": b"caf\xe9"}, "INVALID_CONTENT"),
    ],
)
async def test_a_bad_entry_imports_nothing(
    stub_factory: StubFactory, entries: dict[str, bytes], reason: str
) -> None:
    async with stub_factory(max_doc_bytes=2000) as stub:
        failure = await fails(
            import_tar(stub, make_tar(entries), storage_pb2.IMPORT_STRATEGY_SKIP), INVALID, reason
        )
        assert "nothing was imported" in failure.message
        listing = await stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space()))
        assert list(listing.entries) == []


async def test_import_beyond_quota_imports_nothing(stub_factory: StubFactory) -> None:
    async with stub_factory(quota_private=100) as stub:
        archive = make_tar({"a.md": b"x" * 60, "b.md": b"y" * 60})
        await fails(
            import_tar(stub, archive, storage_pb2.IMPORT_STRATEGY_SKIP),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
        listing = await stub.ListDocuments(storage_pb2.ListDocumentsRequest(space=space()))
        assert list(listing.entries) == []


async def test_import_needs_a_header_and_strategy(stub: Stub) -> None:
    async def no_strategy() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
        yield storage_pb2.ImportSpaceRequest(space=space())

    await fails(stub.ImportSpace(no_strategy()), INVALID)
    await fails(
        import_tar(stub, b"not a tarball", storage_pb2.IMPORT_STRATEGY_SKIP),
        INVALID,
        "INVALID_ARCHIVE",
    )
