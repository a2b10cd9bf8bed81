"""Issue 34: search and the indexer reach other services' data over gRPC only, on the real
backends. Storage, authz and the indexer each get a database of their own; search gets no
MongoDB setting at all. A search carrying a write's position still finds it the first time
(it waits on the indexer's GetIndexProgress), and a reindex of every space lists storage's
documents through StorageService.ListAllDocuments (the indexer's own database holds none).
With the indexer's API away, such a search answers degraded, naming it."""

from __future__ import annotations

import uuid

import pytest

from engram.app.production import (
    ProductionIndexer,
    authz_on_mongo,
    open_indexer,
    search_on_backends,
    storage_on_mongo,
)
from engram.client import EngramClient, Space
from tests.e2e.test_indexer_jetstream import (  # the same deployment as the indexer's suite
    Deployment,
    deployment,
)
from tests.support.read_your_writes import PATIENT_SEARCH
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_backend,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

__all__ = ["deployment"]

ANN = mint("ann", "acme", "member")
BOB = mint("bob", "globex", "member")
ROOT = mint("root", "acme", "admin", platform_admin=True)
NOTES = Space(name="notes")
GLOBEX = Space(name="shared", tenant="globex")


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
        async with search_on_backends(
            # Qdrant local mode admits one client: search shares the indexer's.
            search_settings,
            vector=indexer.vector,
        ) as search_server:
            await exercise(storage_server.port, search_server.port, indexer)


def client(port: int, token: str) -> EngramClient:
    return EngramClient(f"127.0.0.1:{port}", token=token, timeout=90, space=NOTES)


async def exercise(storage_port: int, search_port: int, indexer: ProductionIndexer) -> None:
    """Writes each followed by a search carrying the write's position; a reindex of every
    space; then a search with the indexer's API away."""
    async with (
        client(storage_port, ANN) as ann,
        client(storage_port, BOB) as bob,
        client(search_port, ANN) as search,
        client(indexer.server.port, ROOT) as operator,
    ):
        run = uuid.uuid4().hex[:8]
        writes = [
            ("first.md", f"Heron survey {run}a starts at the north pond.", False),
            ("first.md", f"Later: {run}b herons counted at dawn.", True),
            ("second.md", f"Egret notes {run}c from the marsh.", False),
        ]
        for i, (path, content, append) in enumerate(writes):
            written = await ann.write_document(path, content, append=append)
            assert written.position is not None
            token = f"{run}{'abc'[i]}"
            found = await search.search(token, min_positions=[written.position])
            assert not found.degraded, found.degraded_reasons
            assert any(h.path == path and token in h.content for h in found.results), i

        # One leg at a time: each mode waits on its own leg's progress only, and finds the
        # write the first time.
        for mode in ("lexical", "semantic"):
            path = f"{mode}.md"
            written = await ann.write_document(path, f"A {mode} note {run} about egrets.")
            assert written.position is not None
            found = await search.search(
                f"{mode} egrets {run}", mode=mode, limit=10, min_positions=[written.position]
            )
            assert not found.degraded, (mode, found.degraded_reasons)
            assert any(h.path == path for h in found.results), (mode, found.results)

        for path in ("a.md", "b/c.md"):
            await bob.write_document(path, "x", space=GLOBEX)
        # Four documents in acme's space and two in globex's, none in the indexer's database.
        assert await operator.reindex(all=True) == 4 + 2

        # The indexer's API away (its worker still indexing): a search carrying a position
        # answers at once with what the indexes hold, degraded, saying why.
        await indexer.server.stop()
        written = await ann.write_document("late.md", "A late note about herons.")
        assert written.position is not None
        answer = await search.search("herons", min_positions=[written.position])
        assert answer.degraded
        reasons = " ".join(answer.degraded_reasons)
        assert "index progress unreadable" in reasons, reasons
        assert "the indexer did not answer GetIndexProgress" in reasons, reasons
