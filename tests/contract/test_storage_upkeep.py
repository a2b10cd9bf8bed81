"""StorageService's upkeep RPCs (what quota and maintenance need of the documents), on
`engram dev`'s SQLite and on MongoDB, through engram.client as a service principal: every
space walked page by page, documents scanned with their content in pages bounded by bytes,
a space's stored usage. Refusals for everyone else are the authorization matrix's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.client import AsyncClient, InvalidArgument, Space
from tests.support.backends import RealBackends
from tests.support.deployments import Deployment, secure_deployment
from tests.support.tokens import mint, service_token

pytestmark = pytest.mark.contract

BIG = 600 * 1024


@pytest.fixture(params=["sqlite", "mongo"])
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


def _client(deployment: Deployment, token: str) -> AsyncClient:
    return AsyncClient(f"127.0.0.1:{deployment.ports['storage']}", token=token)


async def test_every_space_is_walked_page_by_page(deployment: Deployment) -> None:
    root = mint("root", "acme", "admin", platform_admin=True)
    async with (
        _client(deployment, root) as acme,
        _client(deployment, mint("gus", "globex", "admin")) as globex,
    ):
        for name in ("b", "a", "c"):
            await acme.write_document("x.md", name, space=Space(name=name))
        await globex.write_document("x.md", "g", space=Space(name="a"))
        await acme.write_document("x.md", "shared", space=Space("global", name="handbook"))
    async with _client(deployment, service_token("maintenance")) as service:
        walked: list[Space] = []
        token = ""
        while True:
            page = await service.list_all_spaces(page_size=2, page_token=token)
            assert len(page.items) <= 2
            walked.extend(page.items)
            token = page.next_page_token
            if not token:
                break
        assert [(s.visibility, s.tenant, s.name) for s in walked] == [
            ("global", "", "handbook"),
            ("private", "acme", "a"),
            ("private", "acme", "b"),
            ("private", "acme", "c"),
            ("private", "globex", "a"),
        ]
        with pytest.raises(InvalidArgument):
            await service.list_all_spaces(page_size=-1)
        assert await service.sum_stored_usage(tenant="acme") == {
            "v1:private:acme::::a": 1,
            "v1:private:acme::::b": 1,
            "v1:private:acme::::c": 1,
        }
        assert await service.sum_stored_usage(global_spaces=True) == {
            "v1:global:::::handbook": len("shared")
        }
        with pytest.raises(InvalidArgument):
            await service.sum_stored_usage(tenant="instance")
        with pytest.raises(InvalidArgument):
            await service.sum_stored_usage(tenant="acme", global_spaces=True)


async def test_documents_are_scanned_with_content_in_pages_bounded_by_bytes(
    deployment: Deployment,
) -> None:
    notes = Space(name="notes", tenant="acme")
    async with _client(deployment, mint("ada", "acme", "admin")) as admin:
        for n in range(3):
            await admin.write_document(f"big-{n}.md", str(n) * BIG, space=Space(name="notes"))
        await admin.write_document("small.md", "tiny", space=Space(name="notes"))
    async with _client(deployment, service_token("maintenance")) as service:
        first = await service.scan_documents(page_size=10, space=notes)
        # A page ends once it holds 1 MiB: two of the 600 KiB documents.
        assert [d.path for d in first.items] == ["big-0.md", "big-1.md"]
        assert first.items[1].content == "1" * BIG and first.items[1].version == 1
        rest = await service.scan_documents(
            page_size=10, page_token=first.next_page_token, space=notes
        )
        assert [d.path for d in rest.items] == ["big-2.md", "small.md"]
        assert rest.next_page_token == ""
        one_by_one = [d.path async for d in service.iter_scan_documents(page_size=1, space=notes)]
        assert one_by_one == ["big-0.md", "big-1.md", "big-2.md", "small.md"]
        usage = await service.stored_usage("v1:private:acme::::notes")
        assert (usage.used_bytes, usage.document_count) == (3 * BIG + 4, 4)
        with pytest.raises(InvalidArgument):
            await service.scan_documents(page_token="not-a-token", space=notes)
        with pytest.raises(InvalidArgument):
            await service.stored_usage("not-a-space-id")
