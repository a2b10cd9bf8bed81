"""SearchService over gRPC on the all-in-one server: the wire contract, status codes and
error details, degradation, the CLI. Chunks go straight into the server's own indexes (the
indexer worker is not what these tests are about)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram
from engram.app.parts import Indexing
from engram.cli.app import app
from engram.cli.search_commands import parse_space, space_label
from engram.domain.chunking import build_chunks
from engram.domain.spaces import SpaceRef, Visibility
from engram.v1 import search_pb2, search_pb2_grpc, space_pb2
from tests.conftest import EngramFactory
from tests.support.grpc_helpers import fails, space

pytestmark = pytest.mark.e2e

NOTES = SpaceRef(Visibility.PRIVATE, "local", "notes")
TEAM = SpaceRef(Visibility.PROJECT, "local", "team", project="p1")
DOCS = {
    (NOTES, "incidents/build.md"): "Build 812 failed with ERR_4021 after the nightly upgrade.",
    (NOTES, "pets/rex.md"): "My dog loves to chase tennis balls in the park every morning.",
    (NOTES, "cooking/risotto.md"): "To make risotto, stir arborio rice with warm stock slowly.",
    (TEAM, "runbook.md"): "When ERR_4021 shows up, clear the cache volume and rerun the build.",
}


async def index_documents(indexing: Indexing) -> None:
    model = indexing.embedder.model
    await indexing.vector.ensure_collection(model)
    await indexing.vector.activate(model.model_id)
    for number, ((ref, path), content) in enumerate(DOCS.items()):
        chunks = build_chunks(
            space_id=ref.id,
            tenant=ref.tenant,
            path=path,
            document_id=f"doc-{number}",
            version=1,
            content=content,
        )
        vectors = await indexing.embedder.embed_documents([c.content for c in chunks])
        await indexing.keyword.replace_chunks(ref.id, path, chunks)
        await indexing.vector.replace_chunks(model.model_id, ref.id, path, chunks, vectors)


@pytest.fixture
async def engram(engram_factory: EngramFactory) -> AsyncIterator[EmbeddedEngram]:
    async with engram_factory() as running:
        indexing = running.indexing
        assert isinstance(indexing, Indexing)
        await index_documents(indexing)
        yield running


@pytest.fixture
async def stub(channel: grpc.aio.Channel) -> search_pb2_grpc.SearchServiceStub:
    return search_pb2_grpc.SearchServiceStub(channel)


def request(query: str, *refs: space_pb2.SpaceRef, **fields: object) -> search_pb2.SearchRequest:
    return search_pb2.SearchRequest(
        spaces=list(refs) or [space("notes")],
        query=query,
        **fields,  # type: ignore[arg-type]
    )


async def test_search_answers_with_every_field(stub: search_pb2_grpc.SearchServiceStub) -> None:
    response = await stub.Search(request("ERR_4021 build failure", limit=2))
    assert response.query == "ERR_4021 build failure"
    assert response.result_count == len(response.results) == 2
    assert not response.degraded and not response.degraded_reasons
    top = response.results[0]
    assert (top.path, top.chunk_id, top.document_id) == ("incidents/build.md", "doc-0:0", "doc-0")
    assert top.space_id == NOTES.id and top.chunk_index == 0
    assert top.content == DOCS[(NOTES, "incidents/build.md")]
    assert top.score == 1.0 and top.is_hybrid_match
    assert (top.bm25_rank, top.vector_rank) == (1, 1)
    assert top.bm25_score > 0 and 0 < top.vector_score <= 1
    assert response.results[1].score < 1.0


async def test_relevance_tells_a_stored_answer_from_none(
    stub: search_pb2_grpc.SearchServiceStub,
) -> None:
    found = await stub.Search(request("ERR_4021 build failure", limit=3))
    top = found.results[0]
    assert top.path == "incidents/build.md" and 0 < top.relevance <= 1
    unrelated = await stub.Search(request("tax deadlines for a limited company", limit=3))
    # The best unrelated chunk still has the best rank score, but not the relevance.
    assert unrelated.results and unrelated.results[0].score >= 0.5
    assert max(r.relevance for r in unrelated.results) < top.relevance
    # The gate: nothing unless a result reaches min_relevance; else every result.
    floor = max(r.relevance for r in unrelated.results) + 1e-6
    assert not (
        await stub.Search(
            request("tax deadlines for a limited company", limit=3, min_relevance=floor)
        )
    ).results
    gated = await stub.Search(request("ERR_4021 build failure", limit=3, min_relevance=floor))
    assert [r.chunk_id for r in gated.results] == [r.chunk_id for r in found.results]


async def test_fusion_can_be_chosen_and_documents_collapsed(
    stub: search_pb2_grpc.SearchServiceStub,
) -> None:
    for fusion in (search_pb2.SEARCH_FUSION_RRF, search_pb2.SEARCH_FUSION_CONVEX):
        answer = await stub.Search(request("ERR_4021", limit=2, fusion=fusion))
        assert answer.results[0].path == "incidents/build.md" and answer.results[0].score == 1.0
    collapsed = await stub.Search(
        request("dog tennis risotto build", limit=5, collapse_documents=True)
    )
    documents = [r.document_id for r in collapsed.results]
    assert len(documents) == len(set(documents)) >= 2


async def test_modes_and_multiple_spaces(stub: search_pb2_grpc.SearchServiceStub) -> None:
    team = space("team", space_pb2.VISIBILITY_PROJECT, project="p1")
    lexical = await stub.Search(
        request("ERR_4021", space("notes"), team, mode=search_pb2.SEARCH_MODE_LEXICAL, limit=10)
    )
    assert {r.path for r in lexical.results} == {"incidents/build.md", "runbook.md"}
    assert all(r.vector_rank == 0 and r.bm25_rank > 0 for r in lexical.results)
    semantic = await stub.Search(
        request("canine enjoys fetching", mode=search_pb2.SEARCH_MODE_SEMANTIC, limit=1)
    )
    assert [r.path for r in semantic.results] == ["pets/rex.md"]
    assert semantic.results[0].bm25_rank == 0
    scoped = await stub.Search(request("ERR_4021", path_prefix="pets", limit=10))
    assert {r.path for r in scoped.results} <= {"pets/rex.md"}


async def test_health_lists_search(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service="engram.v1.SearchService"))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "   \n"}, "query"),
        ({"limit": 101}, "limit"),
        ({"limit": -3}, "limit"),
        ({"mode": 99}, "mode"),
        ({"min_score": 2.0}, "min_score"),
        ({"min_relevance": -0.1}, "min_relevance"),
        ({"min_relevance": 1.5}, "min_relevance"),
        ({"fusion": 99}, "fusion"),
        ({"bm25_weight": -0.5}, "bm25_weight"),
        ({"vector_weight": math.nan}, "vector_weight"),
        ({"rrf_k": -1.0}, "rrf_k"),
        ({"spaces": []}, "spaces"),
        ({"spaces": [space(f"s{i}") for i in range(17)]}, "spaces"),
        ({"spaces": [space("notes"), space_pb2.SpaceRef(name="x")]}, "spaces[1].visibility"),
    ],
)
async def test_invalid_requests_are_invalid_argument_naming_the_field(
    stub: search_pb2_grpc.SearchServiceStub, fields: dict[str, object], field: str
) -> None:
    message = {"spaces": [space("notes")], "query": "ERR_4021", **fields}
    failure = await fails(
        stub.Search(search_pb2.SearchRequest(**message)),  # type: ignore[arg-type]
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert failure.detail(error_details_pb2.BadRequest).field_violations[0].field == field


async def test_another_tenants_space_refuses_the_request(
    stub: search_pb2_grpc.SearchServiceStub,
) -> None:
    foreign = space("notes", tenant="acme")
    failure = await fails(
        stub.Search(request("ERR_4021", space("notes"), foreign)),
        grpc.StatusCode.PERMISSION_DENIED,
        "TENANT_MISMATCH",
    )
    assert "spaces[1]" in failure.message and "'acme'" in failure.message
    assert failure.metadata == {"rule": "tenant_mismatch", "space_index": "1"}


def degraded_count(backend: str) -> float:
    value = REGISTRY.get_sample_value(
        "engram_search_degraded_total", {"backend": backend, "cause": "error"}
    )
    return value or 0.0


async def test_a_failed_index_degrades_the_answer(
    engram: EmbeddedEngram, stub: search_pb2_grpc.SearchServiceStub
) -> None:
    indexing = engram.indexing
    assert isinstance(indexing, Indexing)
    before = degraded_count("keyword")
    await indexing.keyword.close()
    response = await stub.Search(request("canine enjoys fetching", limit=1))
    assert response.degraded
    assert response.degraded_reasons == ["keyword index: the tantivy keyword index is not open"]
    assert [r.path for r in response.results] == ["pets/rex.md"]
    assert degraded_count("keyword") == before + 1
    failure = await fails(
        stub.Search(request("ERR_4021", mode=search_pb2.SEARCH_MODE_LEXICAL)),
        grpc.StatusCode.UNAVAILABLE,
        "SEARCH_UNAVAILABLE",
    )
    assert "keyword index" in failure.message


# --- the CLI ---------------------------------------------------------------------------------


async def cli(engram: EmbeddedEngram, *args: str, ok: bool = True) -> str:
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["search", *args, "--addr", f"127.0.0.1:{engram.port}"]
    )
    text = result.output + (result.stderr if result.stderr_bytes else "")
    assert "Traceback" not in text
    assert (result.exit_code == 0) == ok, text
    return text


async def test_cli_prints_a_table(engram: EmbeddedEngram) -> None:
    text = await cli(
        engram,
        "ERR_4021",
        "--space",
        "private:notes",
        "--space",
        "project:p1/team",
        "--fusion",
        "rrf",
    )
    assert "incidents/build.md" in text and "runbook.md" in text
    assert "#1" in text and "#2" in text and "0.992" in text
    assert "private:notes" in text and "project:p1/team" in text, "several spaces: labelled"
    assert "result(s) for 'ERR_4021'" in text
    lexical = await cli(
        engram, "dog tennis", "-s", "private:notes", "--mode", "lexical", "--limit", "1", "--full"
    )
    assert "pets/rex.md" in lexical and DOCS[(NOTES, "pets/rex.md")] in lexical
    assert "1 result(s)" in lexical


async def test_cli_explains_bad_input(engram: EmbeddedEngram) -> None:
    assert "INVALID_ARGUMENT" in await cli(engram, "  ", "-s", "private:notes", ok=False)
    assert "bot spaces are written" in await cli(engram, "x", "-s", "bot:p1/runs", ok=False)
    assert "--mode must be one of" in await cli(engram, "x", "--mode", "fuzzy", ok=False)
    refused = await cli(engram, "x", "-s", "v1:private:acme::::notes", ok=False)
    assert "PERMISSION_DENIED" in refused


def test_space_labels_read_like_space_specs() -> None:
    assert space_label(NOTES.id) == "private:notes"
    assert space_label(TEAM.id) == "project:p1/team"
    assert space_label("v1:bot:acme:p1:b1::runs") == "bot:p1/b1/runs"


def test_space_specs() -> None:
    assert parse_space("private:notes") == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_PRIVATE, name="notes"
    )
    assert parse_space("bot:p1/b1/runs", tenant="acme") == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_BOT, tenant="acme", project="p1", bot="b1", name="runs"
    )
    assert parse_space("user:me") == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_USER, name="me"
    )
    assert parse_space("user:ann/me").user == "ann"
    assert parse_space("v1:project:acme:p1:::notes") == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_PROJECT, tenant="acme", project="p1", name="notes"
    )
