"""Read your writes in `engram dev`: a write answers an index position, a search carrying it
answers only once the indexes hold the write (or, past its wait budget, degraded with the
index that is behind); MemoryWrite and MemorySearch do the same for agents."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engram.app.embedded import EmbeddedEngram
from engram.app.parts import Indexing
from engram.client import AsyncClient, EngramClient, IndexPosition, InvalidArgument, Space
from engram.domain.positions import IndexLeg
from tests.conftest import EngramFactory
from tests.support.read_your_writes import (
    PATIENT_SEARCH,
    several_writes_one_search,
    write_then_search_pairs,
)

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")


def indexing_of(engram: EmbeddedEngram) -> Indexing:
    indexing = engram.indexing
    assert isinstance(indexing, Indexing)
    return indexing


@pytest.fixture
async def client(engram: EmbeddedEngram) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client:
        yield client


@pytest.mark.timeout(900)
async def test_200_write_then_search_pairs_each_find_their_write(
    engram_factory: EngramFactory,
) -> None:
    async with (
        engram_factory(**PATIENT_SEARCH) as engram,
        AsyncClient(f"127.0.0.1:{engram.port}", space=NOTES) as client,
    ):
        report = await write_then_search_pairs(client, client, NOTES, pairs=200)
    print(
        f"\nengram dev: {report.pairs} pairs in {report.seconds:.1f} s, waited per search "
        f"{report.wait_summary()}"
    )
    assert report.missed == []
    assert report.found_first_time == 200


async def test_one_search_can_carry_several_writes(client: AsyncClient) -> None:
    answer = await several_writes_one_search(client, client, NOTES)
    assert not answer.degraded
    assert answer.keyword_positions_behind == 0


async def test_a_write_not_indexed_in_time_degrades_the_answer(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    # Nothing is indexed any more: the relay that feeds the indexer is stopped.
    await engram.relay.stop()
    written = await client.write_document("late.md", "A note about the zebra migration.")
    assert written.position is not None

    answer = await client.search(
        "zebra migration", mode="lexical", min_positions=[written.position], max_wait_ms=300
    )

    assert answer.degraded
    assert answer.keyword_positions_behind == 1
    assert answer.vector_positions_behind == 0  # lexical: the vector index is not asked
    assert answer.waited_ms >= 300
    assert any(
        reason.startswith("keyword index behind: 1 of 1 positions")
        for reason in answer.degraded_reasons
    ), answer.degraded_reasons
    assert [r.path for r in answer.results] == []

    # The request's own deadline bounds the wait too (less the backend timeout, 1 s).
    answer = await client.with_options(timeout=1.5).search(
        "zebra migration", mode="lexical", min_positions=[written.position]
    )
    assert answer.degraded
    assert answer.keyword_positions_behind == 1


async def test_each_index_waits_only_for_itself(
    engram: EmbeddedEngram, client: AsyncClient
) -> None:
    """The keyword index has recorded the write, the vector index has not: a lexical search
    answers at once; a hybrid one waits its budget for the vector index only."""
    await engram.relay.stop()
    written = await client.write_document("half.md", "Half indexed note.")
    position = written.position
    assert position is not None
    progress = indexing_of(engram).progress
    assert progress is not None
    await progress.record(
        IndexLeg.KEYWORD, position.space_id, position.path, {position.document_id: 1}
    )

    lexical = await client.search(
        "half", mode="lexical", min_positions=[position], max_wait_ms=5000
    )
    assert not lexical.degraded
    assert lexical.keyword_positions_behind == 0
    assert lexical.waited_ms < 5000

    hybrid = await client.search("half", min_positions=[position], max_wait_ms=200)
    assert hybrid.degraded
    assert (hybrid.keyword_positions_behind, hybrid.vector_positions_behind) == (0, 1)
    assert [r for r in hybrid.degraded_reasons if r.startswith("vector index behind")]


async def test_a_delete_or_a_new_document_at_the_path_satisfies_older_positions(
    client: AsyncClient,
) -> None:
    first = await client.write_document("cycle.md", "The first heron note.")
    second = await client.write_document("cycle.md", "The second heron note.")
    deleted = await client.delete_document("cycle.md")
    assert first.position is not None and second.position is not None
    assert deleted.position is not None
    assert deleted.position.document_id == first.position.document_id
    # One past the deleted version 2: only the delete reaches it, not version 2 indexed.
    assert deleted.position.version == 3
    gone = await client.search(
        "heron", mode="lexical", min_positions=[deleted.position], max_wait_ms=20_000
    )
    assert not gone.degraded, gone.degraded_reasons
    assert [r.path for r in gone.results] == []
    again = await client.write_document("cycle.md", "A brand new egret note.")
    assert again.position is not None
    assert again.position.document_id != first.position.document_id
    assert again.position.version == 1

    answer = await client.search(
        "heron egret note",
        mode="lexical",
        min_positions=[first.position, second.position, again.position],
        max_wait_ms=20_000,
    )

    assert not answer.degraded, answer.degraded_reasons
    assert [r.content for r in answer.results] == ["A brand new egret note."]


async def test_positions_must_name_a_searched_space(client: AsyncClient) -> None:
    written = await client.write_document("other.md", "Elsewhere.", space=Space(name="elsewhere"))
    assert written.position is not None

    with pytest.raises(InvalidArgument) as refused:
        await client.search("elsewhere", min_positions=[written.position])
    assert "min_positions[0]" in refused.value.message

    with pytest.raises(InvalidArgument):
        await client.search(
            "x",
            min_positions=[
                IndexPosition(
                    space_id="v1:private:local::::notes", path="", document_id="", version=0
                )
            ],
        )
    with pytest.raises(InvalidArgument):
        await client.search("x", max_wait_ms=-1)


async def test_memory_write_then_memory_search_finds_it(client: AsyncClient) -> None:
    agent = Space(name="agent")
    written = await client.memory_write(
        "The user prefers the kestrel theme.", target="memory", space=agent
    )
    logged = await client.append_daily_log("Talked about the osprey plan.", space=agent)
    assert written.position is not None and logged.position is not None
    assert written.position.path == "MEMORY.md"
    assert logged.position.path == logged.path

    found = await client.memory_search(
        "kestrel osprey", min_positions=[written.position, logged.position], space=agent
    )

    assert not found.degraded, found.degraded_reasons
    assert {hit.path for hit in found.results} == {"MEMORY.md", logged.path}


async def test_the_typed_client_carries_positions(engram: EmbeddedEngram) -> None:
    async with EngramClient(
        f"127.0.0.1:{engram.port}", space=Space(name="typed"), timeout=30
    ) as client:
        written = await client.write_document("notes/plover.md", "The plover survey is due.")
        memory = await client.memory_write("Survey the lapwing nests.", target="memory")
        assert written.position is not None and memory.position is not None
        assert (written.position.path, written.position.version) == ("notes/plover.md", 1)

        found = await client.search(
            "plover lapwing", mode="lexical", min_positions=[written.position, memory.position]
        )
        assert not found.degraded, found.degraded_reasons
        assert {hit.path for hit in found.results} == {"notes/plover.md", "MEMORY.md"}
        assert (found.keyword_positions_behind, found.vector_positions_behind) == (0, 0)

        recalled = await client.memory_search("lapwing", min_positions=[memory.position])
        assert recalled.results[0].path == "MEMORY.md"
        assert not recalled.degraded
