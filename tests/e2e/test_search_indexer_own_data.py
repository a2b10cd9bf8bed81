"""Issue 34: search and the indexer reach other services' data over gRPC only, on the real
backends. Storage, authz and the indexer each get a database of their own; search gets no
MongoDB setting at all. A search carrying a write's position still finds it the first time
(it waits on the indexer's GetIndexProgress), and a reindex of every space lists storage's
documents through StorageService.ListAllDocuments (the indexer's own database holds none).
With the indexer's API away, such a search answers degraded, naming it."""

from __future__ import annotations

import grpc
import pytest

from engram.app.production import authz_on_mongo, open_indexer, search_on_backends, storage_on_mongo
from engram.v1 import (
    indexer_pb2,
    indexer_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
)
from tests.e2e.test_indexer_jetstream import (  # the same deployment as the indexer's suite
    MEMBER,
    OPERATOR,
    Deployment,
    deployment,
)
from tests.support.grpc_helpers import space
from tests.support.read_your_writes import PATIENT_SEARCH, write_then_search_pairs
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

__all__ = ["deployment"]

OTHER_MEMBER = bearer(mint("bob", "globex", "member"))


async def test_search_without_mongodb_waits_on_the_indexer_and_reindex_lists_through_storage(
    deployment: Deployment,
) -> None:
    common = deployment.common
    storage_db = common["mongo_db"]
    authz_settings = server_settings(
        deployment.tmp_path / "authz",
        mongo_uri=common["mongo_uri"],
        mongo_db=f"{storage_db}_authz",
        jwt_secret=TEST_JWT_SECRET,
    )
    # The indexer's own database: its embedding cache and progress rows, no documents.
    indexer_settings = deployment.indexer_settings.model_copy(
        update={"mongo_db": f"{storage_db}_indexer"}
    )
    async with (
        storage_on_mongo(deployment.storage_settings()) as storage_server,
        authz_on_mongo(authz_settings) as authz_server,
        open_indexer(indexer_settings) as indexer,
    ):
        search_settings = server_settings(
            deployment.tmp_path / "search",
            jwt_secret=TEST_JWT_SECRET,
            authz_addr=f"127.0.0.1:{authz_server.port}",
            indexer_addr=f"127.0.0.1:{indexer.server.port}",
            service_token=service_token("search"),
            opensearch_url=indexer_settings.opensearch_url,
            opensearch_index=indexer_settings.opensearch_index,
            opensearch_replicas=0,
            **PATIENT_SEARCH,
        )
        assert search_settings.mongo_uri is None
        async with (
            # Qdrant local mode admits one client: search shares the indexer's.
            search_on_backends(search_settings, vector=indexer.vector) as search_server,
            grpc.aio.insecure_channel(f"127.0.0.1:{storage_server.port}") as storage_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{search_server.port}") as search_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{indexer.server.port}") as indexer_channel,
        ):
            storage = storage_pb2_grpc.StorageServiceStub(storage_channel)
            search = search_pb2_grpc.SearchServiceStub(search_channel)

            report = await write_then_search_pairs(
                storage, search, space(), pairs=4, metadata=MEMBER
            )
            assert report.missed == [], report.missed

            other = space("shared", tenant="globex")
            for path in ("a.md", "b/c.md"):
                await storage.WriteDocument(
                    storage_pb2.WriteDocumentRequest(space=other, path=path, content="x"),
                    metadata=OTHER_MEMBER,
                )
            # The four pairs left four documents in acme's space, one per kind of write.
            reindexed = await indexer_pb2_grpc.IndexerServiceStub(indexer_channel).Reindex(
                indexer_pb2.ReindexRequest(all=True), metadata=OPERATOR
            )
            assert reindexed.documents_enqueued == 4 + 2

            # The indexer's API away (its worker still indexing): a search carrying a
            # position answers at once with what the indexes hold, degraded, saying why.
            await indexer.server.stop()
            written = await storage.WriteDocument(
                storage_pb2.WriteDocumentRequest(
                    space=space(), path="late.md", content="A late note about herons."
                ),
                metadata=MEMBER,
            )
            answer = await search.Search(
                search_pb2.SearchRequest(
                    spaces=[space()], query="herons", min_positions=[written.position]
                ),
                metadata=MEMBER,
                timeout=30,
            )
            assert answer.degraded
            reasons = " ".join(answer.degraded_reasons)
            assert "index progress unreadable" in reasons, reasons
            assert "the indexer did not answer GetIndexProgress" in reasons, reasons
