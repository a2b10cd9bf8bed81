"""Read your writes in `engram dev`: a write answers an index position, a search carrying it
answers only once the indexes hold the write (or, past its wait budget, degraded with the
index that is behind); MemoryWrite and MemorySearch do the same for agents."""

from __future__ import annotations

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram
from engram.app.parts import Indexing
from engram.client import EngramClient, Space
from engram.domain.positions import IndexLeg
from engram.v1 import (
    position_pb2,
    search_pb2,
    search_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from tests.conftest import EngramFactory
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.read_your_writes import (
    PATIENT_SEARCH,
    several_writes_one_search,
    write_then_search_pairs,
)

pytestmark = pytest.mark.e2e


def indexing_of(engram: EmbeddedEngram) -> Indexing:
    indexing = engram.indexing
    assert isinstance(indexing, Indexing)
    return indexing


@pytest.mark.timeout(900)
async def test_200_write_then_search_pairs_each_find_their_write(
    engram_factory: EngramFactory,
) -> None:
    async with (
        engram_factory(**PATIENT_SEARCH) as engram,
        grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel,
    ):
        report = await write_then_search_pairs(
            storage_pb2_grpc.StorageServiceStub(channel),
            search_pb2_grpc.SearchServiceStub(channel),
            space(),
            pairs=200,
        )
    print(
        f"\nengram dev: {report.pairs} pairs in {report.seconds:.1f} s, waited per search "
        f"{report.wait_summary()}"
    )
    assert report.missed == []
    assert report.found_first_time == 200


async def test_one_search_can_carry_several_writes(channel: grpc.aio.Channel) -> None:
    answer = await several_writes_one_search(
        storage_pb2_grpc.StorageServiceStub(channel),
        search_pb2_grpc.SearchServiceStub(channel),
        space(),
    )
    assert not answer.degraded
    assert answer.keyword_positions_behind == 0


async def test_a_write_not_indexed_in_time_degrades_the_answer(
    engram: EmbeddedEngram, channel: grpc.aio.Channel
) -> None:
    # Nothing is indexed any more: the relay that feeds the indexer is stopped.
    await engram.relay.stop()
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    search = search_pb2_grpc.SearchServiceStub(channel)
    written = await storage.WriteDocument(
        write_request("late.md", "A note about the zebra migration.")
    )

    answer = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()],
            query="zebra migration",
            mode=search_pb2.SEARCH_MODE_LEXICAL,
            min_positions=[written.position],
            max_wait_ms=300,
        )
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
    answer = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()],
            query="zebra migration",
            mode=search_pb2.SEARCH_MODE_LEXICAL,
            min_positions=[written.position],
        ),
        timeout=1.5,
    )
    assert answer.degraded
    assert answer.keyword_positions_behind == 1


async def test_each_index_waits_only_for_itself(
    engram: EmbeddedEngram, channel: grpc.aio.Channel
) -> None:
    """The keyword index has recorded the write, the vector index has not: a lexical search
    answers at once; a hybrid one waits its budget for the vector index only."""
    await engram.relay.stop()
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    search = search_pb2_grpc.SearchServiceStub(channel)
    written = await storage.WriteDocument(write_request("half.md", "Half indexed note."))
    position = written.position
    progress = indexing_of(engram).progress
    assert progress is not None
    await progress.record(
        IndexLeg.KEYWORD, position.space_id, position.path, {position.document_id: 1}
    )

    lexical = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()],
            query="half",
            mode=search_pb2.SEARCH_MODE_LEXICAL,
            min_positions=[position],
            max_wait_ms=5000,
        )
    )
    assert not lexical.degraded
    assert lexical.keyword_positions_behind == 0
    assert lexical.waited_ms < 5000

    hybrid = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()], query="half", min_positions=[position], max_wait_ms=200
        )
    )
    assert hybrid.degraded
    assert (hybrid.keyword_positions_behind, hybrid.vector_positions_behind) == (0, 1)
    assert [r for r in hybrid.degraded_reasons if r.startswith("vector index behind")]


async def test_a_delete_or_a_new_document_at_the_path_satisfies_older_positions(
    engram: EmbeddedEngram, channel: grpc.aio.Channel
) -> None:
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    search = search_pb2_grpc.SearchServiceStub(channel)
    first = await storage.WriteDocument(write_request("cycle.md", "The first heron note."))
    second = await storage.WriteDocument(write_request("cycle.md", "The second heron note."))
    deleted = await storage.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=space(), path="cycle.md")
    )
    assert deleted.position.document_id == first.position.document_id
    assert deleted.position.version == 2
    gone = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()],
            query="heron",
            mode=search_pb2.SEARCH_MODE_LEXICAL,
            min_positions=[deleted.position],
            max_wait_ms=20_000,
        )
    )
    assert not gone.degraded, gone.degraded_reasons
    assert [r.path for r in gone.results] == []
    again = await storage.WriteDocument(write_request("cycle.md", "A brand new egret note."))
    assert again.position.document_id != first.position.document_id
    assert again.position.version == 1

    answer = await search.Search(
        search_pb2.SearchRequest(
            spaces=[space()],
            query="heron egret note",
            mode=search_pb2.SEARCH_MODE_LEXICAL,
            min_positions=[first.position, second.position, again.position],
            max_wait_ms=20_000,
        )
    )

    assert not answer.degraded, answer.degraded_reasons
    assert [r.content for r in answer.results] == ["A brand new egret note."]


async def test_positions_must_name_a_searched_space(channel: grpc.aio.Channel) -> None:
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    search = search_pb2_grpc.SearchServiceStub(channel)
    written = await storage.WriteDocument(
        write_request("other.md", "Elsewhere.", ref=space("elsewhere"))
    )

    failure = await fails(
        search.Search(
            search_pb2.SearchRequest(
                spaces=[space()], query="elsewhere", min_positions=[written.position]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "min_positions[0]" in failure.message

    await fails(
        search.Search(
            search_pb2.SearchRequest(
                spaces=[space()],
                query="x",
                min_positions=[position_pb2.IndexPosition(space_id="v1:private:local::::notes")],
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await fails(
        search.Search(search_pb2.SearchRequest(spaces=[space()], query="x", max_wait_ms=-1)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_memory_write_then_memory_search_finds_it(channel: grpc.aio.Channel) -> None:
    workspace = workspace_pb2_grpc.WorkspaceServiceStub(channel)
    ref = space("agent")
    written = await workspace.MemoryWrite(
        workspace_pb2.MemoryWriteRequest(
            space=ref,
            target=workspace_pb2.MEMORY_TARGET_MEMORY,
            content="The user prefers the kestrel theme.",
        )
    )
    logged = await workspace.AppendDailyLog(
        workspace_pb2.AppendDailyLogRequest(space=ref, entry="Talked about the osprey plan.")
    )
    assert written.position.path == "MEMORY.md"
    assert logged.position.path == logged.path

    found = await workspace.MemorySearch(
        workspace_pb2.MemorySearchRequest(
            space=ref, query="kestrel osprey", min_positions=[written.position, logged.position]
        )
    )

    assert not found.degraded, found.degraded_reasons
    assert {hit.path for hit in found.hits} == {"MEMORY.md", logged.path}


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
