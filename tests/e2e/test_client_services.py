"""engram.client's calls of every service against a real `engram dev` (embedded, with
authentication): StorageService beyond read/write (versions, usage, pages, export/import
with progress, purge, space deletion, spaces, the change feed resuming across a restart),
QuotaService, AuthzService, IndexerService and MaintenanceService; the blocking Client
makes the same calls."""

from __future__ import annotations

import asyncio
import io
import socket
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.authz.dev_identity import dev_token
from engram.client import (
    AsyncClient,
    Client,
    Conflict,
    EtagMismatch,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    Space,
    SpaceMaintenance,
    Unauthenticated,
)
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = pytest.mark.e2e

NOTES = Space(name="notes")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[EmbeddedEngram]:
    settings = server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET)
    async with embedded_engram(settings, require_auth=True) as running:
        yield running


@pytest.fixture
async def admin(server: EmbeddedEngram) -> AsyncIterator[AsyncClient]:
    token = dev_token(server.core.jwt_secret)
    async with AsyncClient(f"127.0.0.1:{server.port}", token=token, space=NOTES) as client:
        yield client


async def test_documents_versions_usage_and_pages(admin: AsyncClient) -> None:
    first = await admin.write_document("a.md", "one")
    await admin.write_document("a.md", "two", expected_sha256=first.document.sha256)
    with pytest.raises(EtagMismatch):
        await admin.write_document("a.md", "three", expected_sha256=first.document.sha256)
    for name in ("b.md", "c.md", "d/e.md"):
        await admin.write_document(name, name)
    versions = [v async for v in admin.iter_document_versions("a.md", page_size=1)]
    assert [(v.version, v.current) for v in versions] == [(2, True), (1, False)]
    assert (await admin.read_document("a.md", version=1)).content == "one"
    paths = [e.path async for e in admin.iter_documents(recursive=True, page_size=2)]
    assert paths == ["a.md", "b.md", "c.md", "d/e.md"]
    usage = await admin.get_usage()
    assert (usage.document_count, usage.used_bytes) == (4, 3 + 4 + 4 + 6)
    assert await admin.delete_document("b.md") == 4
    with pytest.raises(NotFound):
        await admin.delete_document("b.md")


async def test_export_import_with_progress_purge_and_space_deletion(
    admin: AsyncClient, tmp_path: Path
) -> None:
    await admin.write_document("MEMORY.md", "remember this")
    await admin.write_document("notes/x.md", "x" * 2000)
    exported: list[int] = []
    archive = tmp_path / "notes.tar.gz"
    size = await admin.export_space(archive, progress=exported.append)
    assert size == archive.stat().st_size == exported[-1]
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["MEMORY.md", "notes/x.md"]

    copy = Space(name="copy")
    sent: list[int] = []
    imported = await admin.import_space(archive, space=copy, progress=sent.append)
    assert (imported.written, imported.bytes, sent[-1]) == (2, 2013, size)
    again = await admin.import_space(archive.read_bytes(), strategy="rename", space=copy)
    assert {e.outcome for e in again.entries} <= {"renamed", "unchanged"}
    chunks = [chunk async for chunk in admin.export_chunks(space=copy)]
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        assert "MEMORY.md" in tar.getnames()
    with pytest.raises(InvalidArgument):
        await admin.import_space(b"not a tar", space=copy)

    purge = await admin.purge_document("MEMORY.md")
    assert purge.purged and purge.refunded_bytes == len("remember this")
    assert not (await admin.purge_document("MEMORY.md")).purged
    spaces = [s async for s in admin.iter_spaces(page_size=1)]
    by_name = {s.space.name: s for s in spaces}
    assert set(by_name) == {"notes", "copy"} and by_name["copy"].document_count >= 2
    with pytest.raises(InvalidArgument):
        await admin.delete_space(confirm_space_id="wrong", space=copy)
    erased = await admin.delete_space(confirm_space_id=by_name["copy"].space_id, space=copy)
    assert erased.documents_erased >= 2
    assert [s.space.name async for s in admin.iter_spaces()] == ["notes"]


async def test_watch_replays_then_resumes_from_its_cursor_across_a_restart(
    tmp_path: Path,
) -> None:
    """The server goes away mid-watch; the watch resumes from its last cursor by itself and
    yields the next change once, nothing repeated."""
    port = free_port()
    settings = server_settings(tmp_path / "engram", grpc_port=port)
    async with AsyncClient(f"127.0.0.1:{port}", space=NOTES, retries=20) as client:
        async with embedded_engram(settings):
            await client.write_document("before.md", "1")
            watch = client.watch_space(from_start=True)
            first = await anext(watch)
            assert first.change is not None and first.change.path == "before.md"
            assert (await anext(watch)).caught_up
        resumed: list[str] = []
        next_event = asyncio.ensure_future(anext(watch))
        await asyncio.sleep(0.5)
        async with embedded_engram(settings):
            await client.write_document("after.md", "2")
            async with asyncio.timeout(60):
                event = await next_event
                while event.change is None:  # a replay from the cursor catches up first
                    event = await anext(watch)
            assert event.change.path == "after.md" and event.change.kind == "written"
            resumed.append(event.change.path)
            await client.delete_document("after.md")
            async with asyncio.timeout(30):
                event = await anext(watch)
                while event.change is None:
                    event = await anext(watch)
            assert (event.change.path, event.change.kind) == ("after.md", "deleted")
            await watch.aclose()
        assert resumed == ["after.md"]


async def test_quota_calls(admin: AsyncClient) -> None:
    charged = await admin.charge(100, idempotency_key="k1")
    assert charged.applied and charged.space_used_bytes == 100
    repeated = await admin.charge(100, idempotency_key="k1")
    assert not repeated.applied and repeated.space_used_bytes == 100
    assert await admin.set_tenant_quota("local", 150) == 150
    with pytest.raises(QuotaExceeded):
        await admin.charge(100, idempotency_key="k2")
    usage = await admin.quota_usage(space=NOTES)
    assert usage.tenant == "local" and usage.tenant_quota_overridden
    assert (usage.tenant_used_bytes, usage.space_used_bytes) == (100, 100)
    reconciled = await admin.reconcile("local")
    assert any(d.actual_bytes == 0 and d.recorded_bytes == 100 for d in reconciled.drifts)
    assert (await admin.quota_usage()).tenant_used_bytes == 0


async def test_authz_calls(server: EmbeddedEngram, admin: AsyncClient) -> None:
    me = await admin.authenticate(dev_token(server.core.jwt_secret))
    assert me.tenant == "local" and me.role == "admin" and me.platform_admin
    with pytest.raises(Unauthenticated):
        await admin.authenticate("egm_nope")
    allowed = await admin.authorize("write")
    assert allowed.allowed and allowed.space.tenant == "local" and allowed.space_id
    created = [await admin.create_token(role="viewer", description=f"t{i}") for i in range(3)]
    listed = [t async for t in admin.iter_tokens(page_size=2)]
    assert [t.token_id for t in listed] == sorted(c.token_id for c in created)
    assert {t.role for t in listed} == {"viewer"}
    viewer = created[0]
    async with AsyncClient(f"127.0.0.1:{server.port}", token=viewer.token, space=NOTES) as other:
        assert (await other.authenticate(viewer.token)).token_id == viewer.token_id
        refused = await other.authorize("write")
        assert not refused.allowed and refused.reason
        with pytest.raises(PermissionDenied):
            await other.write_document("x.md", "x")
    assert await admin.revoke_token(viewer.token_id)
    with pytest.raises(Unauthenticated):
        await admin.authenticate(viewer.token)
    await admin.write_document("rules.md", "be kind", space=Space("global", "handbook"))
    events = [e async for e in admin.iter_audit_events(page_size=1)]
    assert any(e.action == "memory.global_write" and e.path == "rules.md" for e in events)
    with pytest.raises(PermissionDenied):  # service principals only
        await admin.record_audit_event("memory.global_write", path="x.md")
    async with AsyncClient(f"127.0.0.1:{server.port}", token=service_token("workspace")) as service:
        assert await service.record_audit_event("test.event", tenant="local", path="y.md")


async def test_indexer_and_maintenance_calls(admin: AsyncClient) -> None:
    await admin.write_document("MEMORY.md", "facts")
    status = await admin.index_status()
    assert status.active_model and status.dimension > 0
    assert await admin.reindex([NOTES]) == 1
    with pytest.raises(PermissionDenied):
        async with AsyncClient(admin.addr, token=mint("ann", tenant="local")) as member:
            await member.reindex(all=True)

    defaults = await admin.get_space_maintenance()
    assert defaults.log_retention == "archive"
    wanted = SpaceMaintenance(
        dream_enabled=True, log_retention="archive", max_daily_logs=7, stale_after_days=30
    )
    assert await admin.set_space_maintenance(wanted) == wanted
    assert await admin.get_space_maintenance() == wanted
    run = await admin.run_job("staleness_report")
    assert run.job == "staleness_report" and run.outcome == "succeeded" and run.on_demand
    runs = [r async for r in admin.iter_job_runs(job="staleness_report", page_size=1)]
    assert [r.run_id for r in runs] == [run.run_id]
    with pytest.raises(InvalidArgument):
        await admin.run_job("no_such_job")


async def test_blocking_client_makes_the_same_calls(server: EmbeddedEngram, tmp_path: Path) -> None:
    """Run from a thread: the server serves on the test's event loop."""
    token = dev_token(server.core.jwt_secret)

    def script() -> None:
        with Client(f"127.0.0.1:{server.port}", token=token, space=NOTES) as client:
            client.write_document("a.md", "a")
            client.write_document("b.md", "b")
            assert [e.path for e in client.iter_documents(page_size=1)] == ["a.md", "b.md"]
            assert client.export_space(tmp_path / "out.tar.gz") > 0
            assert client.import_space(tmp_path / "out.tar.gz", space=Space(name="c")).written == 2
            assert client.quota_usage().tenant == "local"
            assert client.get_space_maintenance().log_retention == "archive"
            watch = client.watch_space(from_start=True)
            assert next(watch).change is not None
            watch.close()
            quick = client.with_options(timeout=5)
            assert quick.read_document("a.md").content == "a"
            with pytest.raises(Conflict):
                quick.write_document("a.md", "x", create_only=True)

    await asyncio.to_thread(script)
