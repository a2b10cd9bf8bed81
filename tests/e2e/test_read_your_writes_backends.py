"""Read your writes on the real backends, each service on its own: storage on FerretDB
(events through NATS JetStream), the indexer writing OpenSearch and Qdrant (local mode) and
recording its progress on FerretDB, search reading that progress. Every search carries the
position its write answered and finds the write the first time."""

from __future__ import annotations

import grpc
import pytest

from engram.app.production import open_indexer, search_on_backends, storage_on_mongo
from engram.v1 import search_pb2_grpc, storage_pb2_grpc, workspace_pb2, workspace_pb2_grpc
from tests.e2e.test_indexer_jetstream import (  # the same deployment as the indexer's suite
    MEMBER,
    Deployment,
    deployment,
)
from tests.e2e.test_workspace_processes import AGENT, ANN, replicas
from tests.support.grpc_helpers import space
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
        grpc.aio.insecure_channel(f"127.0.0.1:{storage_server.port}") as storage_channel,
        grpc.aio.insecure_channel(f"127.0.0.1:{search_server.port}") as search_channel,
    ):
        storage = storage_pb2_grpc.StorageServiceStub(storage_channel)
        search = search_pb2_grpc.SearchServiceStub(search_channel)

        report = await write_then_search_pairs(storage, search, space(), pairs=200, metadata=MEMBER)
        print(
            f"\nreal backends: {report.pairs} pairs in {report.seconds:.1f} s, waited per "
            f"search {report.wait_summary()}"
        )
        assert report.missed == []

        answer = await several_writes_one_search(storage, search, space(), metadata=MEMBER)
        assert not answer.degraded


async def test_workspace_replicas_pass_positions_through_the_remote_services(
    replicas: list[workspace_pb2_grpc.WorkspaceServiceStub],
) -> None:
    """`engram serve workspace` calls storage and search over gRPC: the write's position
    comes back through StorageService, and MemorySearch hands it on to SearchService."""
    first, second = replicas
    written = await first.MemoryWrite(
        workspace_pb2.MemoryWriteRequest(
            space=AGENT,
            target=workspace_pb2.MEMORY_TARGET_MEMORY,
            content="The corncrake survey starts at dawn.",
        ),
        metadata=ANN,
    )
    assert (written.position.path, written.position.version) == ("MEMORY.md", written.version)

    found = await second.MemorySearch(
        workspace_pb2.MemorySearchRequest(
            space=AGENT, query="corncrake survey", min_positions=[written.position]
        ),
        metadata=ANN,
        timeout=30,
    )

    assert not found.degraded, found.degraded_reasons
    assert (found.keyword_positions_behind, found.vector_positions_behind) == (0, 0)
    assert found.hits[0].path == "MEMORY.md"
