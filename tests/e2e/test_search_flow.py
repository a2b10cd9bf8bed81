"""The whole path in `engram dev` with authentication on: documents written through
StorageService are indexed by the worker and found by SearchService; rewritten or deleted
documents stop showing; tenants never see each other's chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.client import AsyncClient, PermissionDenied, SearchResults, Space
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = pytest.mark.e2e

TEAM = Space("project", "team", project="p1")


@pytest.fixture
async def engram(tmp_path: Path) -> AsyncIterator[EmbeddedEngram]:
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    async with embedded_engram(settings, require_auth=True) as running:
        yield running


async def test_written_documents_are_searchable_and_deleted_ones_are_gone(
    engram: EmbeddedEngram,
) -> None:
    addr = f"127.0.0.1:{engram.port}"
    async with (
        AsyncClient(addr, token=mint("ann", tenant="acme", role="member"), space=TEAM) as ann,
        AsyncClient(addr, token=mint("bob", tenant="globex", role="member"), space=TEAM) as bob,
    ):

        async def find(
            query: str, who: AsyncClient = ann, *, limit: int = 10, mode: str = "hybrid"
        ) -> SearchResults:
            return await who.search(query, limit=limit, mode=mode)

        documents = {
            "incidents/2026-03-03.md": "# Incident\n\nRolled back deploy-2026-03-03: checkout "
            "returned ERR_4021 for every card payment.",
            "pets.md": "# Rex\n\nMy dog loves to chase tennis balls in the park every morning.",
            "recipes/risotto.md": "# Risotto\n\nStir arborio rice with warm stock, slowly.",
        }
        for path, content in documents.items():
            await ann.write_document(path, content)
        await bob.write_document("secret.md", "Globex ERR_4021: the merger.")
        assert await engram.relay.drained(60), "the indexer did not drain the outbox"

        exact = await find("ERR_4021", mode="lexical")
        assert [r.path for r in exact.results] == ["incidents/2026-03-03.md"]
        assert exact.results[0].space_id == "v1:project:acme:p1:::team"
        paraphrase = await find("canine enjoys fetching", limit=1)
        assert [r.path for r in paraphrase.results] == ["pets.md"]
        theirs = await find("ERR_4021", who=bob)
        assert {r.path for r in theirs.results} == {"secret.md"}
        with pytest.raises(PermissionDenied):
            await bob.search("ERR_4021", spaces=[Space(name="team", tenant="acme")])

        await ann.write_document("pets.md", "# Tom\n\nThe cat sleeps on the warm windowsill.")
        await ann.delete_document("incidents/2026-03-03.md")
        assert await engram.relay.drained(60)
        for mode in ("lexical", "semantic"):
            gone = await find("deploy-2026-03-03 ERR_4021 checkout card payment", mode=mode)
            assert "incidents/2026-03-03.md" not in {r.path for r in gone.results}
        rewritten = await find("dog tennis balls", mode="lexical")
        assert "pets.md" not in {r.path for r in rewritten.results}
        cat = await find("cat windowsill", limit=1)
        assert cat.results[0].path == "pets.md" and "windowsill" in cat.results[0].content
