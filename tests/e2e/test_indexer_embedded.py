"""The indexer inside `engram dev`: the outbox relay feeds the worker, which keeps tantivy and
the embedded vector index equal to the chunks of every stored document; IndexerService over
gRPC (Reindex, GetIndexStatus) with its authorization rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.app.parts import Indexing
from engram.authz.tokens import JwtVerifier, TokenAuthenticator
from engram.cli.app import app
from engram.client import (
    AsyncClient,
    InvalidArgument,
    PermissionDenied,
    Space,
    Unauthenticated,
)
from engram.domain.chunking import build_chunks
from engram.domain.chunks import Chunk
from engram.domain.spaces import parse_space_id
from engram.indexer.worker import Outcome
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = pytest.mark.e2e

SPACE_ID = "v1:private:local::::notes"
NOTES = Space(name="notes")


@pytest.fixture
async def client(engram: EmbeddedEngram) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
        yield client


def indexing_of(engram: EmbeddedEngram) -> Indexing:
    indexing = engram.indexing
    assert isinstance(indexing, Indexing)
    return indexing


def paragraphs(count: int, tag: str) -> str:
    """`count` paragraphs of ~300 characters, each naming `tag` and its number."""
    return "".join(
        f"Paragraph {i} about {tag}: the agent noted the deploy of service {tag}-{i} and "
        f"what the review said about error budgets, retries and the on-call rota for the "
        f"week; the follow-ups were filed as issues, one per finding, and linked from the "
        f"release notes so the next run can find them.\n\n"
        for i in range(count)
    )


async def expected_chunks(engram: EmbeddedEngram, space_id: str, path: str) -> list[Chunk]:
    document = await engram.core.repository.get(space_id, path)
    if document is None:
        return []
    settings = engram.core.settings
    return build_chunks(
        space_id=space_id,
        tenant=document.space.tenant,
        path=path,
        document_id=document.document_id,
        version=document.version,
        content=document.content,
        size=settings.chunk_size,
        overlap=settings.chunk_overlap,
    )


async def assert_converged(engram: EmbeddedEngram, space_id: str, path: str) -> list[Chunk]:
    """Waits for the outbox to drain, then checks both indexes hold chunk(current)."""
    assert await engram.relay.drained(60), "the indexer did not drain the outbox"
    indexing = indexing_of(engram)
    expected = await expected_chunks(engram, space_id, path)
    assert await indexing.keyword.chunks_of(space_id, path) == expected
    assert await indexing.vector.chunks_of(space_id, path) == expected
    return expected


async def test_writes_updates_and_deletes_reach_both_indexes(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    await client.write_document("notes/plan.md", paragraphs(6, "alpha"))
    six = await assert_converged(engram, SPACE_ID, "notes/plan.md")
    assert len(six) >= 4
    indexing = indexing_of(engram)
    hits = await indexing.keyword.search([SPACE_ID], "alpha-3 deploy", limit=5)
    assert hits and hits[0].chunk.path == "notes/plan.md"
    query = await indexing.embedder.embed_query("deploy of service alpha and error budgets")
    assert (await indexing.vector.search([SPACE_ID], query, limit=3))[0].chunk.path == (
        "notes/plan.md"
    )

    # Shrinking: the chunks beyond the new count go.
    await client.write_document("notes/plan.md", paragraphs(1, "beta"))
    one = await assert_converged(engram, SPACE_ID, "notes/plan.md")
    assert len(one) == 1 and one[0].doc_version == 2
    assert not await indexing.keyword.search([SPACE_ID], "alpha", limit=5)

    # Deleted: nothing left. Re-created: only the new document's chunks.
    await client.delete_document("notes/plan.md")
    assert await assert_converged(engram, SPACE_ID, "notes/plan.md") == []
    await client.write_document("notes/plan.md", paragraphs(2, "gamma"))
    again = await assert_converged(engram, SPACE_ID, "notes/plan.md")
    assert {c.document_id for c in again} != {c.document_id for c in one}


async def test_duplicate_and_stale_events_leave_the_current_state(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    for i in range(5):
        await client.write_document("log.md", paragraphs(i + 1, f"v{i}"))
    current = await assert_converged(engram, SPACE_ID, "log.md")
    indexing = indexing_of(engram)
    # A slow replica writes what it read long ago (version 1), then the worker handles a
    # duplicated, reordered batch of events for the document: the indexes end current.
    stale = build_chunks(
        space_id=SPACE_ID,
        tenant="local",
        path="log.md",
        document_id=current[0].document_id,
        version=1,
        content=paragraphs(1, "v0"),
    )
    await indexing.keyword.replace_chunks(SPACE_ID, "log.md", stale)
    assert await indexing.keyword.chunks_of(SPACE_ID, "log.md") == current, (
        "the keyword index refuses an older version of the same document"
    )
    vectors = await indexing.embedder.embed_documents([c.content for c in stale])
    model = indexing.models.configured.model_id
    await indexing.vector.replace_chunks(model, SPACE_ID, "log.md", stale, vectors)
    ref = parse_space_id(SPACE_ID)
    results = await indexing.worker.index_many([(ref, "log.md"), (ref, "log.md"), (ref, "x.md")])
    assert results == {(SPACE_ID, "log.md"): None, (SPACE_ID, "x.md"): None}
    assert await indexing.vector.chunks_of(SPACE_ID, "log.md") == current
    assert await indexing.worker.index(ref, "missing.md") is Outcome.DELETED


async def test_a_document_changing_during_indexing_is_indexed_again(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    """The worker re-reads after writing: a change that lands between its read and its
    write (so its events may already have been handled elsewhere) is caught by that pass."""
    await client.write_document("race.md", paragraphs(2, "first"))
    await assert_converged(engram, SPACE_ID, "race.md")
    indexing = indexing_of(engram)
    repository = engram.core.repository
    original_get = repository.get
    changed = False

    async def get_then_change(space_id: str, path: str, **options: bool):  # type: ignore[no-untyped-def]
        nonlocal changed
        document = await original_get(space_id, path, **options)
        if path == "race.md" and not changed:
            changed = True
            # Storage moves on right after the worker's first read.
            await client.write_document("race.md", paragraphs(3, "second"))
        return document

    repository.get = get_then_change  # type: ignore[method-assign]
    try:
        await indexing.worker.index(parse_space_id(SPACE_ID), "race.md")
    finally:
        repository.get = original_get  # type: ignore[method-assign]
    expected = await expected_chunks(engram, SPACE_ID, "race.md")
    assert expected[0].doc_version == 2
    assert await indexing.keyword.chunks_of(SPACE_ID, "race.md") == expected
    assert await indexing.vector.chunks_of(SPACE_ID, "race.md") == expected


async def test_append_to_a_100_chunk_document_embeds_at_most_two_chunks(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    await client.write_document("daily/big.md", paragraphs(100, "daily"))
    chunks = await assert_converged(engram, SPACE_ID, "daily/big.md")
    assert len(chunks) == 100
    embedder = indexing_of(engram).embedder
    before = embedder.embedded_texts
    await client.write_document(
        "daily/big.md", "[12:00:00] appended one line about the deploy\n", append=True
    )
    after = await assert_converged(engram, SPACE_ID, "daily/big.md")
    assert len(after) in (100, 101)
    assert 1 <= embedder.embedded_texts - before <= 2


async def test_reindex_restores_lost_chunks_and_status_reports(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    other = Space(name="other")
    for i in range(3):
        await client.write_document(f"n{i}.md", paragraphs(1, f"n{i}"))
    await client.write_document("o.md", paragraphs(1, "o"), space=other)
    await assert_converged(engram, SPACE_ID, "n0.md")
    indexing = indexing_of(engram)
    for i in range(3):  # an index lost its data
        await indexing.keyword.delete_chunks(SPACE_ID, f"n{i}.md")
        await indexing.vector.delete_chunks(SPACE_ID, f"n{i}.md")

    assert await client.reindex([NOTES]) == 3
    for i in range(3):
        assert len(await assert_converged(engram, SPACE_ID, f"n{i}.md")) == 1
    assert await client.reindex(all=True) == 4
    assert await engram.relay.drained(60)

    status = await client.index_status()
    assert status.active_model == "minilm-l6-v2-int8" and status.dimension == 384
    assert status.pending_model == "" and status.backlog == 0
    assert list(status.collections) == ["minilm-l6-v2-int8"]

    with pytest.raises(InvalidArgument):
        await client.reindex()
    with pytest.raises(InvalidArgument):
        await client.reindex([NOTES], all=True)


async def test_reindex_authorization(tmp_path: Path) -> None:
    authenticator = TokenAuthenticator(
        JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None), None, cache_seconds=0
    )
    async with embedded_engram(
        server_settings(tmp_path / "auth"), authenticator=authenticator
    ) as engram:
        async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as anonymous:
            member = anonymous.as_caller(mint("ann", "acme", "member"), space=NOTES)
            viewer = anonymous.as_caller(mint("vic", "acme", "viewer"), space=NOTES)
            admin = anonymous.as_caller(mint("ada", "acme", "admin"), space=NOTES)
            await member.write_document("a.md", "alpha")

            with pytest.raises(Unauthenticated):
                await anonymous.reindex([NOTES])
            with pytest.raises(PermissionDenied):
                await viewer.reindex([NOTES])
            with pytest.raises(PermissionDenied):
                await member.reindex([Space(name="notes", tenant="other")])
            assert await member.reindex([NOTES]) == 1
            # Every space of every tenant: platform admins and services only.
            with pytest.raises(PermissionDenied):
                await admin.reindex(all=True)
            operator = anonymous.as_caller(mint("root", "acme", "admin", platform_admin=True))
            assert await operator.reindex(all=True) == 1
            service = anonymous.as_caller(service_token())
            with pytest.raises(PermissionDenied) as refused:
                await service.reindex([NOTES])
            assert refused.value.info_reason == "SERVICE_TENANT_REQUIRED"
            assert await service.reindex([Space(name="notes", tenant="acme")]) == 1
            status = await viewer.index_status()
            assert status.active_model == "minilm-l6-v2-int8"
            assert await engram.relay.drained(30)


async def test_cli_reindex_and_index_status(engram: EmbeddedEngram, client: AsyncClient) -> None:
    await client.write_document("a.md", "alpha")
    await client.write_document("b.md", "beta", space=Space(name="other"))
    runner = CliRunner()
    addr = f"127.0.0.1:{engram.port}"

    async def cli(*args: str, ok: bool = True) -> str:
        result = await asyncio.to_thread(runner.invoke, app, [*args, "--addr", addr])
        text = result.output + (result.stderr if result.stderr_bytes else "")
        assert "Traceback" not in text
        assert (result.exit_code == 0) is ok, text
        return text

    assert "queued 1 documents" in await cli("reindex", "--space", "notes")
    assert "queued 2 documents" in await cli(
        "reindex", "--space", "notes", "-s", "v1:private:local::::other"
    )
    assert "queued 2 documents" in await cli("reindex", "--all")
    assert "--all" in await cli("reindex", ok=False)
    assert "--all" in await cli("reindex", "--all", "--space", "notes", ok=False)
    assert await engram.relay.drained(30)
    status = await cli("index-status")
    assert "minilm-l6-v2-int8 (384 dims)" in status and "backlog        0" in status
