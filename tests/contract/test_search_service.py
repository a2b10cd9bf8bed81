"""SearchService on real indexes and the real local embedding model, per backend stack:
tantivy + the embedded vector index (`engram dev`), and OpenSearch (deploy/local) + Qdrant
local mode (the production adapters; no Qdrant server binary can be had here).

What each stack must show: lexical search finds exact identifiers that semantic search
misses, semantic search finds paraphrases lexical search misses, hybrid returns both; no
result ever comes from another tenant or an unrequested space; a deleted document never
appears; a failing index degrades the answer instead of failing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from engram.authz.enforcement import PolicyAuthorizer
from engram.domain.chunking import build_chunks
from engram.domain.chunks import ModelInfo
from engram.domain.errors import InvalidArgument, InvalidSpaceRef, PermissionDenied
from engram.domain.policy import TENANT_MISMATCH
from engram.domain.principals import Principal, Role
from engram.domain.spaces import SpaceRef, Visibility
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import Embedder, KeywordIndex, VectorIndex, Vectors
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.indexes.vector.qdrant_index import QdrantVectorIndex
from engram.search.embedders import ModelEmbedders
from engram.search.errors import SearchUnavailable
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import (
    SearchMode,
    SearchOptions,
    SearchOutcome,
    SearchQuery,
    SearchService,
)
from tests.support.backends import RealBackends

pytestmark = [
    pytest.mark.contract,
    # Qdrant local mode ignores payload indexes and says so; the server needs them.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

ANN = Principal(subject="ann", tenant="acme", role=Role.VIEWER)
GLOBEX_BOB = Principal(subject="bob", tenant="globex", role=Role.MEMBER)

NOTES = SpaceRef(Visibility.PROJECT, "", "notes", project="p1")
ARCHIVE = SpaceRef(Visibility.PROJECT, "", "archive", project="p1")
ACME_NOTES = SpaceRef(Visibility.PROJECT, "acme", "notes", project="p1")
ACME_ARCHIVE = SpaceRef(Visibility.PROJECT, "acme", "archive", project="p1")
GLOBEX_NOTES = SpaceRef(Visibility.PROJECT, "globex", "notes", project="p1")

# The identifiers sit in chunks about something else, so nothing in their meaning points to
# them, while runbooks about errors and releases in general, sharing no token with them, are
# semantically closer to a bare identifier. The pet note shares no word stem with its
# paraphrase.
ERR_NOTE = "office/weekly-2026-02.md"
DEPLOY_NOTE = "office/weekly-2026-03.md"
PET_NOTE = "pets/rex.md"
NOTES_DOCS = {
    ERR_NOTE: "Weekly office notes: the coffee machine on floor two works again, parking "
    "passes renew in May, the team offsite moves to Lisbon, the printer jams on thick paper, "
    "and the quiet room is booked on Mondays. Priya owns ticket ERR_4021.",
    DEPLOY_NOTE: "Weekly sync: we are hiring two designers, the kitchen gets repainted on "
    "Friday, the book club picked a novel about sailing, lunch on Thursday is tacos, the "
    "plants by the window need water, and Sam's farewell party starts at six. Pricing page: "
    "deploy-2026-03-03.",
    PET_NOTE: "My dog loves to chase tennis balls in the park every morning.",
    "runbooks/errors.md": "Error codes from the payment API are listed in this runbook, with "
    "the fix for each failure code.",
    "runbooks/codes.md": "Status codes in the 4000 range mean the card issuer declined the "
    "payment.",
    "runbooks/timeouts.md": "Ticket queue: timeout errors from the search cluster, each with "
    "an incident number.",
    "runbooks/linker.md": "The build failed with an error code in the linker stage after the "
    "compiler upgrade.",
    "runbooks/http.md": "HTTP 500 errors spiked at noon when the database connection pool ran dry.",
    # "redeploy" is its own stem, so these match "deploy-2026-03-03" in meaning only.
    "releases/process.md": "Every Tuesday we redeploy the web app through the release "
    "pipeline, each rollout tagged with its date.",
    "releases/calendar.md": "Each redeploy of the web app to production is tagged with the "
    "date it went out.",
    "releases/tags.md": "Redeploy tags name the day a build went to production, like a dated "
    "changelog entry.",
    "releases/rollback.md": "If a redeploy goes wrong, redeploy the previous dated tag and "
    "purge the CDN cache.",
    "cooking/risotto.md": "To make risotto, stir arborio rice with warm stock slowly.",
    "travel/lisbon.md": "We took the old yellow tram up the hill to the castle.",
    "finance/q3.md": "Quarterly revenue grew four percent on subscription sales.",
    "garden/tomatoes.md": "Water the tomato plants deeply twice a week in summer.",
    "health/sleep.md": "Adults should aim for seven to nine hours of sleep each night.",
    "music/piano.md": "She practises Chopin nocturnes on the upright piano after dinner.",
    "cars/tyres.md": "Check the tyre pressure monthly and before long road trips.",
}
# The same identifiers and topics in spaces ann must never see unless she asks for them.
ARCHIVE_DOCS = {
    "old.md": "Archived: ticket ERR_4021 and deploy-2026-03-03 from last year. My dog loves "
    "to chase tennis balls in the park every morning."
}
GLOBEX_DOCS = {
    "secret.md": "Globex only: ticket ERR_4021 tracks the merger, deploy-2026-03-03 ships it. "
    "Our dog loves to chase tennis balls in the park every morning."
}

PARAPHRASE = "canine enjoys fetching"


@pytest.fixture(scope="session")
def embedder() -> Iterator[LocalOnnxEmbedder]:
    # Loaded once per session; its worker thread serves every test's event loop.
    local = LocalOnnxEmbedder()
    yield local
    local.close()


@dataclass
class Stack:
    keyword: KeywordIndex
    vector: VectorIndex
    embedder: LocalOnnxEmbedder
    versions: dict[tuple[str, str], int]

    def service(self, *, timeout: float = 5.0, depth: int = 50) -> SearchService:
        return SearchService(
            self.keyword,
            self.vector,
            ModelEmbedders.serving(self.embedder),
            PolicyAuthorizer(),
            options=SearchOptions(candidate_depth=depth, backend_timeout_seconds=timeout),
            query_cache=QueryEmbeddingCache(64),
        )

    async def put(self, space: SpaceRef, path: str, content: str) -> None:
        await self.put_many([(space, path, content)])

    async def put_many(self, documents: list[tuple[SpaceRef, str, str]]) -> None:
        """Chunks, embeds (one batch) and indexes the documents, all writes concurrently."""
        batches = []
        for space, path, content in documents:
            version = self.versions.get((space.id, path), 0) + 1
            self.versions[(space.id, path)] = version
            chunks = build_chunks(
                space_id=space.id,
                tenant=space.tenant,
                path=path,
                document_id=f"doc-{uuid.uuid5(uuid.NAMESPACE_URL, space.id + path)}",
                version=version,
                content=content,
            )
            batches.append((space.id, path, chunks))
        texts = [chunk.content for _, _, chunks in batches for chunk in chunks]
        vectors = await self.embedder.embed_documents(texts)
        writes = []
        start = 0
        for space_id, path, chunks in batches:
            rows = vectors[start : start + len(chunks)]
            start += len(chunks)
            writes.append(self.keyword.replace_chunks(space_id, path, chunks))
            writes.append(
                self.vector.replace_chunks(
                    self.embedder.model.model_id, space_id, path, chunks, rows
                )
            )
        await asyncio.gather(*writes)

    async def delete(self, space: SpaceRef, path: str) -> None:
        await self.keyword.delete_chunks(space.id, path)
        await self.vector.delete_chunks(space.id, path)


async def _drop_opensearch(url: str, alias: str) -> None:
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=f"{alias}-*", ignore_unavailable=True)
        await client.indices.delete_index_template(name=f"{alias}-template", ignore=[404])
    finally:
        await client.close()


@pytest.fixture(
    params=["tantivy+numpy", pytest.param("opensearch+qdrant", marks=pytest.mark.real_backend)]
)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalOnnxEmbedder
) -> AsyncIterator[Stack]:
    async with _stack(request, request.param, tmp_path, embedder) as built:
        yield built


@pytest.fixture
async def embedded_stack(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalOnnxEmbedder
) -> AsyncIterator[Stack]:
    """For what happens before any index is asked (validation): one stack is enough."""
    async with _stack(request, "tantivy+numpy", tmp_path, embedder) as built:
        yield built


@contextlib.asynccontextmanager
async def _stack(
    request: pytest.FixtureRequest, kind: str, tmp_path: Path, embedder: LocalOnnxEmbedder
) -> AsyncIterator[Stack]:
    keyword: KeywordIndex
    vector: VectorIndex
    cleanup = None
    if kind == "tantivy+numpy":
        keyword = TantivyKeywordIndex(tmp_path / "keyword")
        vector = NumpyVectorIndex(tmp_path / "vectors")
    else:
        backends: RealBackends = request.getfixturevalue("real_backends")
        url = backends.url("opensearch")
        alias = f"engram-search-test-{uuid.uuid4().hex[:10]}"
        keyword = OpenSearchKeywordIndex(url, alias=alias, replicas=0)
        vector = QdrantVectorIndex(AsyncQdrantClient(path=str(tmp_path / "qdrant")))
        cleanup = (url, alias)
    await keyword.open()
    await vector.open()
    await vector.ensure_collection(embedder.model)
    await vector.activate(embedder.model.model_id)
    built = Stack(keyword, vector, embedder, {})
    try:
        await built.put_many(
            [
                (space, path, content)
                for space, docs in (
                    (ACME_NOTES, NOTES_DOCS),
                    (ACME_ARCHIVE, ARCHIVE_DOCS),
                    (GLOBEX_NOTES, GLOBEX_DOCS),
                )
                for path, content in docs.items()
            ]
        )
        yield built
    finally:
        await keyword.close()
        await vector.close()
        if cleanup is not None:
            await _drop_opensearch(*cleanup)


async def search(
    service: SearchService,
    text: str,
    *,
    mode: SearchMode = SearchMode.HYBRID,
    spaces: tuple[SpaceRef, ...] = (NOTES,),
    principal: Principal = ANN,
    **fields: object,
) -> SearchOutcome:
    query = SearchQuery(spaces=spaces, text=text, mode=mode, **fields)  # type: ignore[arg-type]
    return await service.search(principal, query)


def paths(outcome: SearchOutcome) -> list[str]:
    return [hit.chunk.path for hit in outcome.hits]


# --- lexical vs semantic vs hybrid -----------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "target"), [("ERR_4021", ERR_NOTE), ("deploy-2026-03-03", DEPLOY_NOTE)]
)
async def test_lexical_finds_exact_identifiers_that_semantic_misses(
    stack: Stack, identifier: str, target: str
) -> None:
    service = stack.service()
    lexical = await search(service, identifier, mode=SearchMode.LEXICAL, limit=3)
    assert paths(lexical)[0] == target
    top = lexical.hits[0]
    assert top.bm25_rank == 1 and top.bm25_score > 0
    assert top.vector_rank == 0 and top.vector_score == 0.0 and not top.is_hybrid_match
    assert top.score == 1.0
    semantic = await search(service, identifier, mode=SearchMode.SEMANTIC, limit=3)
    assert target not in paths(semantic), paths(semantic)
    assert all(hit.bm25_rank == 0 and hit.vector_rank > 0 for hit in semantic.hits)


async def test_semantic_finds_paraphrases_that_lexical_misses(stack: Stack) -> None:
    service = stack.service()
    semantic = await search(service, PARAPHRASE, mode=SearchMode.SEMANTIC, limit=3)
    assert paths(semantic)[0] == PET_NOTE
    assert 0 < semantic.hits[0].vector_score <= 1 and semantic.hits[0].score == 1.0
    lexical = await search(service, PARAPHRASE, mode=SearchMode.LEXICAL, limit=100)
    assert PET_NOTE not in paths(lexical)


async def test_hybrid_returns_what_each_mode_alone_finds(stack: Stack) -> None:
    service = stack.service()
    for text, target in (
        ("ERR_4021", ERR_NOTE),
        ("deploy-2026-03-03", DEPLOY_NOTE),
        (PARAPHRASE, PET_NOTE),
    ):
        hybrid = await search(service, text, limit=3)
        assert paths(hybrid)[0] == target, (text, paths(hybrid))
        assert not hybrid.degraded
    both = await search(service, f"ERR_4021 {PARAPHRASE}", limit=5)
    found = {hit.chunk.path: hit for hit in both.hits}
    assert {ERR_NOTE, PET_NOTE} <= found.keys(), paths(both)
    assert found[ERR_NOTE].bm25_rank == 1
    assert found[PET_NOTE].vector_rank == 1 and found[PET_NOTE].bm25_rank == 0


async def test_results_carry_every_field(stack: Stack) -> None:
    outcome = await search(stack.service(), "tyre pressure before road trips", limit=1)
    assert outcome.query == "tyre pressure before road trips"
    (hit,) = outcome.hits
    chunk = hit.chunk
    assert chunk.path == "cars/tyres.md" and chunk.space_id == ACME_NOTES.id
    assert chunk.content == NOTES_DOCS["cars/tyres.md"]
    assert chunk.chunk_index == 0 and chunk.chunk_id == f"{chunk.document_id}:0"
    assert hit.is_hybrid_match and hit.bm25_rank == 1 and hit.vector_rank == 1
    assert hit.score == 1.0 and hit.bm25_score > 0 and 0 < hit.vector_score <= 1


async def test_limit_min_score_and_weights(stack: Stack) -> None:
    service = stack.service()
    many = await search(service, "errors after the upgrade", limit=100)
    assert 5 < len(many.hits) <= len(NOTES_DOCS)
    scores = [hit.score for hit in many.hits]
    assert scores == sorted(scores, reverse=True) and scores[0] <= 1.0
    assert len((await search(service, "errors after the upgrade")).hits) == 5
    kept = await search(service, "errors after the upgrade", limit=100, min_score=0.5)
    assert [h.chunk.chunk_id for h in kept.hits] == [
        h.chunk.chunk_id for h in many.hits if h.score >= 0.5
    ]
    # The weights decide between the lexical and the semantic favourite.
    text = f"ERR_4021 {PARAPHRASE}"
    assert paths(await search(service, text, limit=2)) == [ERR_NOTE, PET_NOTE]
    vector_heavy = await search(service, text, bm25_weight=0.01, limit=1)
    assert paths(vector_heavy) == [PET_NOTE]
    bm25_heavy = await search(service, text, vector_weight=0.01, limit=1)
    assert paths(bm25_heavy) == [ERR_NOTE]


async def test_path_prefix_selects_whole_directories(stack: Stack) -> None:
    service = stack.service()
    for mode in SearchMode:
        outcome = await search(service, "errors", mode=mode, path_prefix="runbooks/", limit=100)
        assert outcome.hits and {p.split("/")[0] for p in paths(outcome)} == {"runbooks"}
        assert await search(service, "errors", mode=mode, path_prefix="run", limit=100) == (
            SearchOutcome(query="errors", hits=[])
        )
        single = await search(service, "anything", mode=mode, path_prefix=ERR_NOTE, limit=100)
        assert set(paths(single)) <= {ERR_NOTE}


# --- who sees what ---------------------------------------------------------------------------


async def test_results_never_leave_the_requested_spaces(stack: Stack) -> None:
    service = stack.service()
    for mode in SearchMode:
        for text in ("ERR_4021", "deploy-2026-03-03", PARAPHRASE, "dog tennis balls"):
            outcome = await search(service, text, mode=mode, limit=100)
            assert {hit.chunk.space_id for hit in outcome.hits} <= {ACME_NOTES.id}, (mode, text)
            assert outcome.hits or (mode, text) == (SearchMode.LEXICAL, PARAPHRASE)
        both = await search(service, "ERR_4021", mode=mode, spaces=(NOTES, ARCHIVE), limit=100)
        assert {hit.chunk.space_id for hit in both.hits} == {ACME_NOTES.id, ACME_ARCHIVE.id}
    # Another tenant's principal, same space name: only its own tenant's chunks.
    globex = await search(service, "ERR_4021", principal=GLOBEX_BOB, limit=100)
    assert {hit.chunk.space_id for hit in globex.hits} == {GLOBEX_NOTES.id}


async def test_a_space_of_another_tenant_refuses_the_whole_request(stack: Stack) -> None:
    service = stack.service()
    with pytest.raises(PermissionDenied) as caught:
        await search(
            service, "ERR_4021", spaces=(NOTES, ARCHIVE, NOTES, GLOBEX_NOTES, GLOBEX_NOTES)
        )
    assert caught.value.rule == TENANT_MISMATCH
    # Named by its position in the request, repeats included.
    assert "spaces[3]" in caught.value.message and "'globex'" in caught.value.message
    assert caught.value.metadata == {"rule": TENANT_MISMATCH, "space_index": "3"}


async def test_user_spaces_are_stamped_with_the_caller(stack: Stack) -> None:
    mine = SpaceRef(Visibility.USER, "acme", "me", user="ann")
    await stack.put(mine, "diary.md", "ERR_4021 also showed up in my own diary.")
    service = stack.service()
    own = await search(service, "ERR_4021", spaces=(SpaceRef(Visibility.USER, "", "me"),))
    assert paths(own) == ["diary.md"]
    with pytest.raises(PermissionDenied):
        await search(
            service, "ERR_4021", spaces=(mine,), principal=Principal("eve", "acme", Role.ADMIN)
        )
    # Eve's own user space of that name is another space: empty, not Ann's.
    eve = Principal("eve", "acme", Role.ADMIN)
    theirs = await search(
        service, "ERR_4021", spaces=(SpaceRef(Visibility.USER, "", "me"),), principal=eve
    )
    assert theirs.hits == []


async def test_a_deleted_document_never_appears(stack: Stack) -> None:
    service = stack.service()
    assert ERR_NOTE in paths(await search(service, "ERR_4021 coffee machine", limit=100))
    await stack.delete(ACME_NOTES, ERR_NOTE)
    for mode in SearchMode:
        for text in ("ERR_4021", "coffee machine on floor two", "Priya owns the ticket"):
            outcome = await search(service, text, mode=mode, limit=100)
            assert ERR_NOTE not in paths(outcome), (mode, text)
    # Rewritten documents show only their new content.
    await stack.put(ACME_NOTES, PET_NOTE, "The cat sleeps on the warm windowsill all day.")
    outcome = await search(service, "dog tennis balls park", mode=SearchMode.LEXICAL, limit=100)
    assert PET_NOTE not in paths(outcome)
    (hit,) = (await search(service, "cat windowsill", limit=1)).hits
    assert hit.chunk.path == PET_NOTE and "windowsill" in hit.chunk.content


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"text": ""}, "query"),
        ({"text": " \t\n "}, "query"),
        ({"text": "x" * 4097}, "query"),
        ({"limit": 101}, "limit"),
        ({"limit": -1}, "limit"),
        ({"min_score": 1.5}, "min_score"),
        ({"min_score": -0.1}, "min_score"),
        ({"min_score": float("nan")}, "min_score"),
        ({"bm25_weight": -1.0}, "bm25_weight"),
        ({"vector_weight": float("inf")}, "vector_weight"),
        ({"rrf_k": -60.0}, "rrf_k"),
        ({"spaces": ()}, "spaces"),
        ({"spaces": tuple(SpaceRef(Visibility.PRIVATE, "", f"s{i}") for i in range(17))}, "spaces"),
    ],
)
async def test_invalid_requests_name_the_field(
    embedded_stack: Stack, fields: dict[str, object], field: str
) -> None:
    query = SearchQuery(**{"spaces": (NOTES,), "text": "ERR_4021", **fields})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as caught:
        await embedded_stack.service().search(ANN, query)
    assert caught.value.field == field


async def test_spaces_are_deduplicated_and_sixteen_is_the_maximum(embedded_stack: Stack) -> None:
    service = embedded_stack.service()
    sixteen = tuple(SpaceRef(Visibility.PRIVATE, "", f"s{i}") for i in range(15)) + (NOTES,)
    outcome = await search(service, "ERR_4021", spaces=sixteen * 3, limit=1)
    assert paths(outcome) == [ERR_NOTE]
    # The same space named with and without the caller's tenant is one space.
    twice = await search(service, "ERR_4021", spaces=(NOTES, ACME_NOTES), limit=100)
    assert len({hit.chunk.chunk_id for hit in twice.hits}) == len(twice.hits)


async def test_an_invalid_space_names_its_position(embedded_stack: Stack) -> None:
    bad = SpaceRef(Visibility.BOT, "", "runs", project="p1")
    with pytest.raises(InvalidSpaceRef) as caught:
        await search(embedded_stack.service(), "x", spaces=(NOTES, bad))
    assert caught.value.field == "spaces[1].bot"


# --- degradation -----------------------------------------------------------------------------


async def test_a_closed_index_degrades_to_the_other(stack: Stack) -> None:
    service = stack.service()
    await stack.keyword.close()
    outcome = await search(service, PARAPHRASE, limit=3)
    assert outcome.degraded and len(outcome.degraded_reasons) == 1
    assert outcome.degraded_reasons[0].startswith("keyword index: ")
    assert paths(outcome)[0] == PET_NOTE
    # Normalised over the list that answered: first place is still 1.0.
    assert outcome.hits[0].score == 1.0 and outcome.hits[0].bm25_rank == 0
    with pytest.raises(SearchUnavailable) as caught:
        await search(service, PARAPHRASE, mode=SearchMode.LEXICAL)
    assert "keyword index" in caught.value.message
    semantic = await search(service, PARAPHRASE, mode=SearchMode.SEMANTIC, limit=1)
    assert not semantic.degraded and paths(semantic) == [PET_NOTE]


async def test_a_backend_over_its_deadline_is_left_out(stack: Stack) -> None:
    service = stack.service(timeout=1e-6)
    with pytest.raises(SearchUnavailable) as caught:
        await search(service, "ERR_4021 never cached")
    assert "no answer within" in caught.value.message


# --- the active vector model decides the query embedder ---------------------------------------


class Renamed:
    """The local model under another model id: a stand-in for a second model."""

    def __init__(self, embedder: LocalOnnxEmbedder, model_id: str) -> None:
        self._embedder = embedder
        self.model = ModelInfo(model_id, embedder.model.dimension)
        self.queries = 0

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return await self._embedder.embed_documents(texts)

    async def embed_query(self, text: str) -> Vectors:
        self.queries += 1
        return await self._embedder.embed_query(text)


async def test_queries_are_embedded_by_the_active_models_embedder(embedded_stack: Stack) -> None:
    # A switch to the configured model is under way: the alias still names the old one,
    # whose collection alone holds the pet note.
    old = Renamed(embedded_stack.embedder, "old-model")
    vector = embedded_stack.vector
    await vector.ensure_collection(old.model)
    chunks = await vector.chunks_of(ACME_NOTES.id, PET_NOTE)
    await vector.replace_chunks(
        old.model.model_id,
        ACME_NOTES.id,
        PET_NOTE,
        chunks,
        await old.embed_documents([c.content for c in chunks]),
    )
    await vector.activate(old.model.model_id)

    configured = embedded_stack.embedder

    def build(model: ModelInfo) -> Embedder | None:
        return {old.model: old, configured.model: configured}.get(model)

    embedders = ModelEmbedders(build, owns_embedders=False)
    service = SearchService(embedded_stack.keyword, vector, embedders, PolicyAuthorizer())
    semantic = await search(service, PARAPHRASE, mode=SearchMode.SEMANTIC, limit=10)
    assert paths(semantic) == [PET_NOTE] and old.queries == 1
    # Without an embedder for the active model, semantic search degrades, naming it.
    stranded = SearchService(
        embedded_stack.keyword, vector, ModelEmbedders.serving(configured), PolicyAuthorizer()
    )
    hybrid = await search(stranded, PARAPHRASE, limit=3)
    assert hybrid.degraded and "'old-model'" in hybrid.degraded_reasons[0]
    # The switch completes: the configured model's collection answers again.
    await vector.activate(configured.model.model_id)
    fresh = SearchService(embedded_stack.keyword, vector, embedders, PolicyAuthorizer())
    done = await search(fresh, "ERR_4021 coffee machine", mode=SearchMode.SEMANTIC, limit=20)
    assert len(done.hits) > 1 and old.queries == 1


async def test_search_builds_its_own_query_embedder_per_model() -> None:
    from engram.app.config import Components
    from engram.indexer.embedders.local import MODEL_ID, LocalOnnxEmbedder
    from engram.runtime.settings import Settings

    config = Components.from_settings(Settings(search_embed_threads=1)).query_embedder
    embedders = ModelEmbedders.from_config(config)
    local = embedders.for_model(ModelInfo(MODEL_ID, 384))
    assert isinstance(local, LocalOnnxEmbedder)
    assert embedders.for_model(ModelInfo(MODEL_ID, 384)) is local, "built once, then kept"
    assert embedders.for_model(ModelInfo(MODEL_ID, 768)) is None, "another dimension"
    assert embedders.for_model(ModelInfo("unheard-of", 8)) is None
    await embedders.aclose()


async def test_a_search_that_read_the_alias_before_a_switch_dropped_it_still_answers(
    embedded_stack: Stack,
) -> None:
    # The service read the old model from the alias (and keeps it for a moment); the switch
    # then moves the alias and drops the old collection. The next semantic search must
    # answer from the new model, not degrade.
    old = Renamed(embedded_stack.embedder, "old-model")
    vector = embedded_stack.vector
    configured = embedded_stack.embedder
    await vector.ensure_collection(old.model)
    chunks = await vector.chunks_of(ACME_NOTES.id, PET_NOTE)
    await vector.replace_chunks(
        old.model.model_id,
        ACME_NOTES.id,
        PET_NOTE,
        chunks,
        await old.embed_documents([c.content for c in chunks]),
    )
    await vector.activate(old.model.model_id)

    def build(model: ModelInfo) -> Embedder | None:
        return {old.model: old, configured.model: configured}.get(model)

    service = SearchService(
        embedded_stack.keyword,
        vector,
        ModelEmbedders(build, owns_embedders=False),
        PolicyAuthorizer(),
    )
    before = await search(service, PARAPHRASE, mode=SearchMode.SEMANTIC, limit=10)
    assert paths(before) == [PET_NOTE] and old.queries == 1

    await vector.activate(configured.model.model_id)
    await vector.drop_collection(old.model.model_id)
    after = await search(service, PARAPHRASE, mode=SearchMode.SEMANTIC, limit=10)
    assert not after.degraded, after.degraded_reasons
    assert PET_NOTE in paths(after) and len(after.hits) > 1, "answered from the new model"
