"""The whole path in `engram dev` with authentication on: documents written through
StorageService are indexed by the worker and found by SearchService; rewritten or deleted
documents stop showing; tenants never see each other's chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.v1 import search_pb2, search_pb2_grpc, space_pb2, storage_pb2, storage_pb2_grpc
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint

pytestmark = pytest.mark.e2e

ANN = bearer(mint("ann", tenant="acme", role="member"))
BOB = bearer(mint("bob", tenant="globex", role="member"))
TEAM = space("team", space_pb2.VISIBILITY_PROJECT, project="p1")


@pytest.fixture
async def engram(tmp_path: Path) -> AsyncIterator[EmbeddedEngram]:
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    async with embedded_engram(settings, require_auth=True) as running:
        yield running


async def test_written_documents_are_searchable_and_deleted_ones_are_gone(
    engram: EmbeddedEngram,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{engram.port}") as channel:
        storage = storage_pb2_grpc.StorageServiceStub(channel)
        search = search_pb2_grpc.SearchServiceStub(channel)

        async def find(
            query: str, who: tuple[tuple[str, str]] = ANN, **fields: object
        ) -> search_pb2.SearchResponse:
            message = search_pb2.SearchRequest(
                spaces=[TEAM],
                query=query,
                **{"limit": 10, **fields},  # type: ignore[arg-type]
            )
            return await search.Search(message, metadata=who)

        documents = {
            "incidents/2026-03-03.md": "# Incident\n\nRolled back deploy-2026-03-03: checkout "
            "returned ERR_4021 for every card payment.",
            "pets.md": "# Rex\n\nMy dog loves to chase tennis balls in the park every morning.",
            "recipes/risotto.md": "# Risotto\n\nStir arborio rice with warm stock, slowly.",
        }
        for path, content in documents.items():
            await storage.WriteDocument(write_request(path, content, ref=TEAM), metadata=ANN)
        await storage.WriteDocument(
            write_request("secret.md", "Globex ERR_4021: the merger.", ref=TEAM), metadata=BOB
        )
        assert await engram.relay.drained(60), "the indexer did not drain the outbox"

        exact = await find("ERR_4021", mode=search_pb2.SEARCH_MODE_LEXICAL)
        assert [r.path for r in exact.results] == ["incidents/2026-03-03.md"]
        assert exact.results[0].space_id == "v1:project:acme:p1:::team"
        paraphrase = await find("canine enjoys fetching", limit=1)
        assert [r.path for r in paraphrase.results] == ["pets.md"]
        theirs = await find("ERR_4021", who=BOB)
        assert {r.path for r in theirs.results} == {"secret.md"}
        await fails(
            search.Search(
                search_pb2.SearchRequest(spaces=[space("team", tenant="acme")], query="ERR_4021"),
                metadata=BOB,
            ),
            grpc.StatusCode.PERMISSION_DENIED,
        )

        await storage.WriteDocument(
            write_request("pets.md", "# Tom\n\nThe cat sleeps on the warm windowsill.", ref=TEAM),
            metadata=ANN,
        )
        await storage.DeleteDocument(
            storage_pb2.DeleteDocumentRequest(space=TEAM, path="incidents/2026-03-03.md"),
            metadata=ANN,
        )
        assert await engram.relay.drained(60)
        for mode in (search_pb2.SEARCH_MODE_LEXICAL, search_pb2.SEARCH_MODE_SEMANTIC):
            gone = await find("deploy-2026-03-03 ERR_4021 checkout card payment", mode=mode)
            assert "incidents/2026-03-03.md" not in {r.path for r in gone.results}
        rewritten = await find("dog tennis balls", mode=search_pb2.SEARCH_MODE_LEXICAL)
        assert "pets.md" not in {r.path for r in rewritten.results}
        cat = await find("cat windowsill", limit=1)
        assert cat.results[0].path == "pets.md" and "windowsill" in cat.results[0].content
