"""The KeywordIndex contract, run against every adapter: tantivy on a temporary directory and
OpenSearch on the real engine (`ENGRAM_TEST_OPENSEARCH_URL`, or one started here through
deploy/local/backends.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from engram.domain.chunks import Chunk, IndexedDocument, chunk_id
from engram.domain.errors import InvalidArgument
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import IndexUnavailable, KeywordIndex
from engram.runtime.settings import Settings
from tests.support.backends import RealBackends, load_launcher

pytestmark = pytest.mark.contract

REPO = Path(__file__).resolve().parents[2]
RUN_ID = uuid.uuid4().hex[:8]

AWKWARD_QUERIES = [
    '"unbalanced',
    'say "hello',
    "C++",
    "a:b",
    "(",
    ")",
    "*",
    "?",
    "AND",
    "OR NOT",
    "-",
    "title:",
    "~2",
    "^3",
    "[1 TO",
    "{x}",
    "\\",
    "/regex/",
    "foo && bar || !baz",
    "😀",
    "👨‍👩‍👧 emoji family",
    "",
    "   ",
    "\x00",
    "x" * 5000,
    " ".join(["word"] * 3000),
    "東京" * 1000,
]


# --- OpenSearch, started once per session unless the environment names one ----------------


@pytest.fixture(scope="session")
def keyword_opensearch_url(real_backends: RealBackends) -> str:
    """The session's one OpenSearch (shared with every other suite)."""
    return real_backends.url("opensearch")


# --- adapters --------------------------------------------------------------------------------

Factory = Callable[[], KeywordIndex]


class _Harness:
    """Builds adapter instances on the same storage (to reopen) and cleans up after."""

    def __init__(self, kind: str, make: Factory, cleanup: Callable[[], Any] | None = None):
        self.kind = kind
        self.make = make
        self.cleanup = cleanup


async def _drop_opensearch(url: str, alias: str) -> None:
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=f"{alias}-*", ignore_unavailable=True)
        await client.indices.delete_index_template(name=f"{alias}-template", ignore=[404])
    finally:
        await client.close()


@pytest.fixture(params=["tantivy", pytest.param("opensearch", marks=pytest.mark.real_backend)])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> _Harness:
    if request.param == "tantivy":
        return _Harness("tantivy", lambda: TantivyKeywordIndex(tmp_path / "keyword"))
    url: str = request.getfixturevalue("keyword_opensearch_url")
    alias = f"engram-test-{RUN_ID}-{uuid.uuid4().hex[:8]}"
    return _Harness(
        "opensearch",
        lambda: OpenSearchKeywordIndex(url, alias=alias, replicas=0, refresh_interval="1s"),
        lambda: _drop_opensearch(url, alias),
    )


@pytest.fixture
async def index(harness: _Harness) -> AsyncIterator[KeywordIndex]:
    adapter = harness.make()
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.close()
        if harness.cleanup is not None:
            await harness.cleanup()


# --- helpers ---------------------------------------------------------------------------------


def make_chunks(
    space_id: str,
    path: str,
    texts: list[str],
    *,
    document_id: str | None = None,
    version: int = 1,
    tenant: str = "t1",
) -> list[Chunk]:
    doc = document_id or f"doc-{space_id}-{path}"
    return [
        Chunk(
            chunk_id=chunk_id(doc, i),
            document_id=doc,
            space_id=space_id,
            tenant=tenant,
            path=path,
            chunk_index=i,
            doc_version=version,
            content=text,
        )
        for i, text in enumerate(texts)
    ]


async def put(
    index: KeywordIndex, space_id: str, path: str, texts: list[str], **kw: Any
) -> list[Chunk]:
    chunks = make_chunks(space_id, path, texts, **kw)
    await index.replace_chunks(space_id, path, chunks)
    return chunks


async def hit_ids(
    index: KeywordIndex, spaces: list[str], query: str, *, limit: int = 50, path_prefix: str = ""
) -> list[str]:
    hits = await index.search(spaces, query, limit=limit, path_prefix=path_prefix)
    return [h.chunk.chunk_id for h in hits]


def space(name: str) -> str:
    return f"v1:project:t1:p1:::{name}"


# --- the contract ----------------------------------------------------------------------------


async def test_replace_then_search_finds_the_chunk_with_its_fields(index: KeywordIndex) -> None:
    s = space("a")
    chunks = await put(
        index,
        s,
        "notes/a.md",
        ["The deployment pipeline failed twice.", "Lunch was pasta."],
        version=3,
    )
    hits = await index.search([s], "pipeline", limit=5)
    assert [h.chunk for h in hits] == [chunks[0]]
    assert hits[0].score > 0


async def test_replace_with_fewer_chunks_removes_the_extras(index: KeywordIndex) -> None:
    s = space("a")
    await put(index, s, "a.md", ["alpha one", "alpha two", "alpha three"], version=1)
    kept = await put(index, s, "a.md", ["alpha uno"], version=2)
    assert await index.chunks_of(s, "a.md") == kept
    assert await hit_ids(index, [s], "alpha") == [kept[0].chunk_id]
    assert await hit_ids(index, [s], "three") == []


async def test_replace_with_no_chunks_empties_the_path(index: KeywordIndex) -> None:
    s = space("a")
    await put(index, s, "a.md", ["kiwi"], version=1)
    await index.replace_chunks(s, "a.md", [])
    assert await index.chunks_of(s, "a.md") == []
    assert await hit_ids(index, [s], "kiwi") == []


async def test_delete_removes_only_that_path(index: KeywordIndex) -> None:
    s = space("a")
    await put(index, s, "a.md", ["mango smoothie", "mango lassi"])
    other = await put(index, s, "b.md", ["mango chutney"])
    await index.delete_chunks(s, "a.md")
    assert await index.chunks_of(s, "a.md") == []
    assert await hit_ids(index, [s], "mango") == [other[0].chunk_id]
    # Deleting what is not there is not an error.
    await index.delete_chunks(s, "a.md")
    await index.delete_chunks(s, "never/was.md")


async def test_recreated_document_leaves_no_old_chunks(index: KeywordIndex) -> None:
    s = space("a")
    await put(
        index, s, "a.md", ["old papaya", "old guava", "old lychee"], document_id="old", version=9
    )
    new = await put(index, s, "a.md", ["new papaya"], document_id="new", version=1)
    assert await index.chunks_of(s, "a.md") == new
    assert await hit_ids(index, [s], "papaya guava lychee") == [new[0].chunk_id]


async def test_same_version_replace_is_idempotent(index: KeywordIndex) -> None:
    s = space("a")
    first = await put(index, s, "a.md", ["same words", "more words"], version=4)
    again = await put(index, s, "a.md", ["same words", "more words"], version=4)
    assert first == again
    assert await index.chunks_of(s, "a.md") == first


async def test_an_older_version_of_the_same_document_does_not_roll_back(
    index: KeywordIndex,
) -> None:
    s = space("a")
    newer = await put(
        index, s, "a.md", ["v6 apricot", "v6 fig", "v6 date"], document_id="d", version=6
    )
    await put(index, s, "a.md", ["v5 apricot"], document_id="d", version=5)
    assert await index.chunks_of(s, "a.md") == newer
    assert await hit_ids(index, [s], "apricot") == [newer[0].chunk_id]


async def test_space_filter_never_leaks(index: KeywordIndex) -> None:
    # Ids that are prefixes of each other, or hold a comma (legal in a space name).
    names = [f"s{i}" for i in range(12)] + ["s1,0", "s1-0"]
    spaces = [space(n) for n in names]
    for s in spaces:
        await put(index, s, "shared.md", ["secret rhubarb recipe"] * 3)
        await put(index, s, "notes/x.md", ["rhubarb in notes"])
    wanted = [space("s1"), space("s1,0")]
    hits = await index.search(wanted, "rhubarb recipe", limit=100)
    assert {h.chunk.space_id for h in hits} == set(wanted)
    assert len(hits) == 8
    for s in spaces:
        hits = await index.search([s], "rhubarb", limit=100, path_prefix="notes")
        assert [h.chunk.space_id for h in hits] == [s]
    assert await index.search([space("nobody")], "rhubarb", limit=10) == []
    assert await index.search([], "rhubarb", limit=10) == []


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("", {"notes/a.md", "notes/x/b.md", "notesX.md", "notes.md", "notes2/c.md", "top.md"}),
        ("notes", {"notes/a.md", "notes/x/b.md"}),
        ("notes/", {"notes/a.md", "notes/x/b.md"}),
        ("/notes/", {"notes/a.md", "notes/x/b.md"}),
        ("notes/x", {"notes/x/b.md"}),
        ("notes/x/", {"notes/x/b.md"}),
        ("notes/a.md", {"notes/a.md"}),
        ("notes/a", set()),
        ("note", set()),
        ("notesX.md", {"notesX.md"}),
        ("missing", set()),
    ],
)
async def test_path_prefix_is_a_directory_prefix(
    index: KeywordIndex, prefix: str, expected: set[str]
) -> None:
    s = space("a")
    for path in ["notes/a.md", "notes/x/b.md", "notesX.md", "notes.md", "notes2/c.md", "top.md"]:
        await put(index, s, path, ["tangerine"])
    hits = await index.search([s], "tangerine", limit=50, path_prefix=prefix)
    assert {h.chunk.path for h in hits} == expected


async def test_english_stemming(index: KeywordIndex) -> None:
    s = space("a")
    runs = await put(index, s, "a.md", ["The service runs nightly."])
    cats = await put(index, s, "b.md", ["Two cats were sleeping."])
    assert await hit_ids(index, [s], "running") == [runs[0].chunk_id]
    assert await hit_ids(index, [s], "cat sleeps") == [cats[0].chunk_id]


async def test_a_chunk_is_found_by_its_headings_and_returns_its_own_text(
    index: KeywordIndex,
) -> None:
    s = space("a")
    (chunk,) = make_chunks(s, "plan.md", ["We moved the renewal date to March."])
    chunk = dataclasses.replace(chunk, heading="# Vendors\n## Invoicing")
    other = make_chunks(s, "other.md", ["The renewal of the lease is in May."])
    await index.replace_chunks(s, "plan.md", [chunk])
    await index.replace_chunks(s, "other.md", other)
    hits = await index.search([s], "invoicing renewal", limit=5)
    assert [h.chunk.chunk_id for h in hits] == [chunk.chunk_id, other[0].chunk_id]
    assert hits[0].chunk.content == "We moved the renewal date to March."
    # Stop words in a question do not drag in every chunk that holds them.
    assert await hit_ids(index, [s], "what is the invoicing?") == [chunk.chunk_id]


async def test_exact_identifiers_are_found_and_ranked_first(index: KeywordIndex) -> None:
    s = space("a")
    err = await put(index, s, "err.md", ["Build failed with ERR_4021 after the upgrade."])
    deploy = await put(index, s, "deploy.md", ["Rolled back deploy-2026-03-03 at noon."])
    # The same tokens, scattered: a bag-of-tokens match only.
    await put(
        index,
        s,
        "noise.md",
        [f"err {i} 4021 deploy 2026 03 and then 03 again, err err 4021 deploy" for i in range(3)],
    )
    for filler in range(5):
        await put(index, s, f"filler{filler}.md", ["unrelated text about gardening"])
    assert (await hit_ids(index, [s], "ERR_4021"))[0] == err[0].chunk_id
    assert (await hit_ids(index, [s], "err_4021"))[0] == err[0].chunk_id
    assert (await hit_ids(index, [s], "deploy-2026-03-03"))[0] == deploy[0].chunk_id
    assert (await hit_ids(index, [s], "what happened in deploy-2026-03-03?"))[0] == deploy[
        0
    ].chunk_id


@pytest.mark.parametrize("query", AWKWARD_QUERIES, ids=range(len(AWKWARD_QUERIES)))
async def test_awkward_queries_never_raise(index: KeywordIndex, query: str) -> None:
    s = space("a")
    await put(index, s, "a.md", ['C++ and a:b (with "quotes") AND OR * 😀 東京 word'])
    hits = await index.search([s], query, limit=10, path_prefix="a.md")
    assert all(h.chunk.space_id == s for h in hits)


async def test_scores_descend_and_limit_holds(index: KeywordIndex) -> None:
    s = space("a")
    for i in range(20):
        await put(index, s, f"d{i}.md", [" ".join(["plum"] * (i + 1) + ["pear"] * (20 - i))])
    hits = await index.search([s], "plum", limit=7)
    assert len(hits) == 7
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0].chunk.path == "d19.md"
    assert await index.search([s], "plum", limit=0) == []


async def test_chunks_of_returns_every_chunk_by_index(index: KeywordIndex) -> None:
    s = space("a")
    chunks = make_chunks(s, "big.md", [f"chunk number {i}" for i in range(2500)])
    shuffled = chunks[1::2] + chunks[::2]
    await index.replace_chunks(s, "big.md", shuffled)
    assert await index.chunks_of(s, "big.md") == chunks
    assert await index.chunks_of(s, "other.md") == []
    assert await index.chunks_of(space("b"), "big.md") == []


async def test_concurrent_writes_are_all_visible_when_they_return(index: KeywordIndex) -> None:
    s = space("a")

    async def write_and_find(i: int) -> list[str]:
        await put(index, s, f"c/{i}.md", [f"quince{i} marker"])
        return await hit_ids(index, [s], f"quince{i}")

    found = await asyncio.gather(*(write_and_find(i) for i in range(40)))
    assert found == [[chunk_id(f"doc-{s}-c/{i}.md", 0)] for i in range(40)]
    hits = await index.search([s], "marker", limit=100, path_prefix="c")
    assert len(hits) == 40


async def test_chunks_must_belong_to_the_path(index: KeywordIndex) -> None:
    s = space("a")
    chunks = make_chunks(s, "a.md", ["x"])
    with pytest.raises(InvalidArgument):
        await index.replace_chunks(s, "b.md", chunks)
    with pytest.raises(InvalidArgument):
        await index.replace_chunks(space("b"), "a.md", chunks)


async def test_data_survives_close_and_reopen(harness: _Harness) -> None:
    s = space("a")
    first = harness.make()
    await first.open()
    try:
        chunks = await put(first, s, "keep.md", ["persistent walnut", "second walnut"])
        await first.open()  # idempotent
    finally:
        await first.close()
    await first.close()  # idempotent
    second = harness.make()
    await second.open()
    try:
        assert await second.chunks_of(s, "keep.md") == chunks
        assert set(await hit_ids(second, [s], "walnut")) == {c.chunk_id for c in chunks}
        again = await put(second, s, "keep.md", ["rewritten walnut"], version=2)
        assert await second.chunks_of(s, "keep.md") == again
    finally:
        await second.close()
        if harness.cleanup is not None:
            await harness.cleanup()


async def test_a_closed_index_is_unavailable(harness: _Harness) -> None:
    adapter = harness.make()
    with pytest.raises(IndexUnavailable):
        await adapter.search([space("a")], "x", limit=5)
    with pytest.raises(IndexUnavailable):
        await adapter.replace_chunks(space("a"), "a.md", [])


# --- adapter-specific failure modes ----------------------------------------------------------


async def test_tantivy_refuses_a_second_writer_on_the_same_directory(tmp_path: Path) -> None:
    first = TantivyKeywordIndex(tmp_path / "kw")
    await first.open()
    try:
        with pytest.raises(IndexUnavailable, match="another writer"):
            await TantivyKeywordIndex(tmp_path / "kw").open()
    finally:
        await first.close()
    # Once the first one is closed the lock is free.
    again = TantivyKeywordIndex(tmp_path / "kw")
    await again.open()
    await again.close()


async def test_tantivy_refuses_an_index_of_another_schema_version(tmp_path: Path) -> None:
    adapter = TantivyKeywordIndex(tmp_path / "kw")
    await adapter.open()
    await adapter.close()
    (tmp_path / "kw" / "engram-keyword-index.json").write_text('{"schema_version": 0}')
    with pytest.raises(IndexUnavailable, match="schema version 0"):
        await TantivyKeywordIndex(tmp_path / "kw").open()


async def test_opensearch_unreachable_is_index_unavailable() -> None:
    port = load_launcher().free_port()
    adapter = OpenSearchKeywordIndex(f"http://127.0.0.1:{port}", timeout_seconds=2.0)
    with pytest.raises(IndexUnavailable, match="cannot reach"):
        await adapter.open()


@pytest.mark.real_backend
async def test_opensearch_reports_a_vanished_index_as_unavailable(
    keyword_opensearch_url: str,
) -> None:
    alias = f"engram-test-{RUN_ID}-gone"
    adapter = OpenSearchKeywordIndex(keyword_opensearch_url, alias=alias, replicas=0)
    await adapter.open()
    try:
        await _drop_opensearch(keyword_opensearch_url, alias)
        with pytest.raises(IndexUnavailable, match="404"):
            await adapter.search([space("a")], "anything", limit=5)
    finally:
        await adapter.close()
        await _drop_opensearch(keyword_opensearch_url, alias)


@pytest.mark.real_backend
async def test_opensearch_open_is_idempotent_across_instances(keyword_opensearch_url: str) -> None:
    alias = f"engram-test-{RUN_ID}-twice"
    adapters = [
        OpenSearchKeywordIndex(keyword_opensearch_url, alias=alias, replicas=0) for _ in range(3)
    ]
    try:
        await asyncio.gather(*(a.open() for a in adapters))
        await put(adapters[0], space("a"), "a.md", ["cherry"])
        assert await hit_ids(adapters[2], [space("a")], "cherry") == [
            chunk_id(f"doc-{space('a')}-a.md", 0)
        ]
    finally:
        for a in adapters:
            await a.close()
        await _drop_opensearch(keyword_opensearch_url, alias)


def test_adapters_are_built_from_settings(tmp_path: Path) -> None:
    from engram.app.adapters import opensearch_index, tantivy_index
    from engram.app.config import OpenSearchNeeds, require
    from engram.domain.errors import MissingSetting

    settings = Settings(data_dir=tmp_path, opensearch_url="http://127.0.0.1:9")
    assert tantivy_index(settings).directory == tmp_path / "keyword"
    url = require(settings, [OpenSearchNeeds])[OpenSearchNeeds].opensearch_url
    assert opensearch_index(url, settings).alias == "engram-chunks"
    with pytest.raises(MissingSetting, match="ENGRAM_OPENSEARCH_URL"):
        require(Settings(opensearch_url=None), [OpenSearchNeeds])


async def test_delete_space_removes_every_chunk_of_that_space_only(index: KeywordIndex) -> None:
    gone, stays = space("erased"), space("stays")
    await put(index, gone, "a.md", ["walnut tart", "walnut bread"])
    await put(index, gone, "dir/b.md", ["walnut oil"])
    kept = await put(index, stays, "a.md", ["walnut cake"])
    await index.delete_space(gone)
    assert await index.chunks_of(gone, "a.md") == []
    assert await index.chunks_of(gone, "dir/b.md") == []
    assert await hit_ids(index, [gone, stays], "walnut") == [kept[0].chunk_id]
    # Erasing an empty space is not an error, and the space takes new chunks afterwards.
    await index.delete_space(gone)
    again = await put(index, gone, "a.md", ["walnut again"], document_id="new")
    assert await index.chunks_of(gone, "a.md") == again


async def test_indexed_documents_sums_up_each_path_of_the_space(index: KeywordIndex) -> None:
    s, other = space("a"), space("b")
    assert await index.indexed_documents(s) == {}
    await put(index, s, "a.md", ["one", "two", "three"], document_id="d-a", version=4)
    await put(index, s, "notes/b.md", ["only"], document_id="d-b", version=1)
    await put(index, other, "a.md", ["elsewhere"], document_id="d-o", version=2)
    assert await index.indexed_documents(s) == {
        "a.md": IndexedDocument("d-a", 4, 3),
        "notes/b.md": IndexedDocument("d-b", 1, 1),
    }
    await index.delete_chunks(s, "a.md")
    assert set(await index.indexed_documents(s)) == {"notes/b.md"}
    assert await index.indexed_documents(other) == {"a.md": IndexedDocument("d-o", 2, 1)}
