"""Read your writes on the real backends, each service on its own: storage on FerretDB
(events through NATS JetStream), the indexer writing OpenSearch and Qdrant (local mode) and
recording its progress on FerretDB, search reading that progress. Every search carries the
position its write answered and finds the write the first time."""

from __future__ import annotations

import pytest

from engram.app.production import open_indexer, search_on_backends, storage_on_mongo
from engram.client import AsyncClient
from tests.e2e.test_indexer_jetstream import (  # the same deployment as the indexer's suite
    NOTES,
    Deployment,
    deployment,
    engram_client,
)
from tests.e2e.test_workspace_processes import replicas
from tests.support.read_your_writes import (
    PATIENT_SEARCH,
    several_writes_one_search,
    write_then_search_pairs,
)
from tests.support.settings import server_settings

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

__all__ = ["deployment", "replicas"]


# Each pair goes through JetStream, OpenSearch, Qdrant local mode and FerretDB: minutes on a
# loaded 2-core machine.
@pytest.mark.timeout(1200)
async def test_200_write_then_search_pairs_on_real_backends(deployment: Deployment) -> None:
    indexer_settings = deployment.indexer_settings
    search_settings = server_settings(
        deployment.tmp_path / "search",
        **deployment.common,
        opensearch_url=indexer_settings.opensearch_url,
        opensearch_index=indexer_settings.opensearch_index,
        opensearch_replicas=0,
        **PATIENT_SEARCH,
    )
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        open_indexer(indexer_settings) as indexer,
        # Qdrant local mode admits one client: search shares the indexer's.
        search_on_backends(search_settings, vector=indexer.vector) as search_server,
        engram_client(storage_server.port) as storage,
        engram_client(search_server.port) as search,
    ):
        report = await write_then_search_pairs(storage, search, NOTES, pairs=200)
        print(
            f"\nreal backends: {report.pairs} pairs in {report.seconds:.1f} s, waited per "
            f"search {report.wait_summary()}"
        )
        assert report.missed == []

        answer = await several_writes_one_search(storage, search, NOTES)
        assert not answer.degraded


async def test_workspace_replicas_pass_positions_through_the_remote_services(
    replicas: list[AsyncClient],
) -> None:
    """`engram serve workspace` calls storage and search over gRPC: the write's position
    comes back through StorageService, and MemorySearch hands it on to SearchService."""
    first, second = replicas
    written = await first.memory_write("The corncrake survey starts at dawn.", target="memory")
    assert written.position is not None
    assert (written.position.path, written.position.version) == ("MEMORY.md", written.version)

    found = await second.memory_search("corncrake survey", min_positions=[written.position])

    assert not found.degraded, found.degraded_reasons
    assert (found.keyword_positions_behind, found.vector_positions_behind) == (0, 0)
    assert found.results[0].path == "MEMORY.md"
