"""Issue 34: quota and maintenance own their data and reach storage's over gRPC only.
Storage, QuotaService and the maintenance worker each run here on a database of their own,
so neither quota nor maintenance can read a document from storage's collections: what they
report and change came through StorageService's RPCs, as service principals."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram.app.production import authz_on_mongo
from engram.client import AsyncClient, NotFound, Space, SpaceMaintenance
from engram.domain.maintenance import JobOutcome
from engram.maintenance.remote_storage import RemoteReconciler, RemoteStorage
from tests.support.backends import RealBackends
from tests.support.owned_data import OwnedData, owned_data
from tests.support.tokens import mint, service_token

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

NOTES = Space(name="notes")
# The same space as a service names it (services name the tenant).
NOTES_AS_SERVICE = Space(name="notes", tenant="acme")
SPACE_COUNTER = "space:v1:private:acme::::notes"


def _log(days_ago: int) -> str:
    return f"daily/{(datetime.now(UTC).date() - timedelta(days=days_ago)).isoformat()}.md"


async def _drift(running: OwnedData, delta: int) -> None:
    """A charge whose write never landed: the counters now overstate the documents."""
    assert running.quota is not None
    async with AsyncClient(
        f"127.0.0.1:{running.quota.port}", token=service_token("storage")
    ) as storage_principal:
        await storage_principal.charge(delta, idempotency_key="lost-write", space=NOTES_AS_SERVICE)


async def test_quota_reconciles_and_reports_from_storage_service(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    async with owned_data(tmp_path, real_backends) as running:
        assert running.storage is not None and running.quota is not None
        async with running.client(running.storage.port, NOTES) as storage:
            await storage.write_document("a.md", "x" * 100)
            await storage.write_document("b.md", "y" * 50)
        await _drift(running, 500)
        async with running.client(running.quota.port, NOTES) as quota:
            drifted = await quota.quota_usage(space=NOTES)
            assert (drifted.space_used_bytes, drifted.space_document_count) == (650, 2)
            done = await quota.reconcile()
            assert {(d.counter, d.recorded_bytes, d.actual_bytes) for d in done.drifts} == {
                (SPACE_COUNTER, 650, 150),
                ("tenant:acme", 650, 150),
            }
            assert done.spaces_checked == 1
            after = await quota.quota_usage(space=NOTES)
            assert (after.space_used_bytes, after.tenant_used_bytes) == (150, 150)


async def test_maintenance_jobs_act_through_storage_service(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    async with owned_data(tmp_path, real_backends) as running:
        assert running.storage is not None
        async with running.client(running.storage.port, NOTES) as storage:
            await storage.write_document("same.md", "Same text.\n")
            await storage.write_document("copy.md", "Same   text.")
            for n in range(4):
                await storage.write_document("plan.md", f"plan v{n}\n")
            for days_ago in (1, 40, 60):
                await storage.write_document(_log(days_ago), f"entry {days_ago}\n")
        # Fewer versions kept from now on: version pruning has three to erase.
        await running.start_storage(version_retention=1)
        await _drift(running, 300)
        async with running.maintenance() as maintenance:
            assert isinstance(maintenance.deps.storage, RemoteStorage)
            assert isinstance(maintenance.deps.quota, RemoteReconciler)
            async with running.client(maintenance.server.port, NOTES) as jobs:
                await jobs.set_space_maintenance(
                    SpaceMaintenance(log_retention="delete", log_retention_days=30)
                )
                # Pruned once the relay has published the versions' events.
                pruned = 0
                for _ in range(100):
                    pruned += (await jobs.run_job("version_pruning")).counts["versions_pruned"]
                    if pruned >= 2:
                        break
                    await asyncio.sleep(0.1)
                assert pruned == 2
                walked = await maintenance.maintenance.worker.tick()
                assert {run.space.name for run in walked} == {"notes"}, "spaces listed remotely"
                ran = {run.job: run for run in walked}
                assert all(run.outcome is JobOutcome.SUCCEEDED for run in walked), [
                    (r.job, r.message) for r in walked
                ]
                assert ran["log_retention"].counts["logs_deleted"] == 2
                assert ran["duplicate_report"].counts["duplicate_groups"] == 1
                assert ran["embedding_backfill"].counts["documents_checked"] == 4
                assert ran["staleness_report"].counts["documents_checked"] == 3
                assert ran["usage_reconcile"].counts["counters_corrected"] == 2
        async with running.client(running.storage.port, NOTES) as storage:
            for days_ago in (40, 60):
                with pytest.raises(NotFound):
                    await storage.read_document(_log(days_ago))
            assert (await storage.read_document(_log(1))).content == "entry 1\n"
            versions = [v async for v in storage.iter_document_versions("plan.md")]
            assert [v.version for v in versions] == [4, 3]
            usage = await storage.get_usage()
            assert (usage.document_count, usage.tenant_used_bytes) == (4, usage.used_bytes)


async def test_maintenance_audits_settings_changes_at_authz(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    """The audit log is AuthzService's: maintenance, on a database of its own, records a
    settings change there, and ListAuditEvents shows it."""
    async with owned_data(tmp_path, real_backends) as running:
        async with authz_on_mongo(running.settings("authz")) as authz:
            address = f"127.0.0.1:{authz.port}"
            async with running.maintenance(settings={"authz_addr": address}) as maintenance:
                async with running.client(maintenance.server.port, NOTES) as jobs:
                    await jobs.set_space_maintenance(SpaceMaintenance(stale_after_days=7))
            root = mint("root", "acme", "admin", platform_admin=True)
            async with AsyncClient(address, token=root) as admin:
                events = [e async for e in admin.iter_audit_events()]
    assert [(e.action, e.space_id, e.subject) for e in events] == [
        ("maintenance.settings", "v1:private:acme::::notes", "ada")
    ]


async def test_storage_audits_global_writes_at_authz(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    """Storage, on a database of its own, records a global write's audit row at AuthzService
    (which owns the audit log): ListAuditEvents shows it, with the writer and the bytes."""
    async with owned_data(tmp_path, real_backends) as running:
        async with authz_on_mongo(running.settings("authz")) as authz:
            address = f"127.0.0.1:{authz.port}"
            await running.start_storage(authz_addr=address)
            root = mint("root", "acme", "admin", platform_admin=True)
            shared = Space(visibility="global", name="handbook")
            async with AsyncClient(
                f"127.0.0.1:{running.storage_port}", token=root, space=shared
            ) as storage:
                await storage.write_document("rules.md", "Be kind.\n")
            async with AsyncClient(address, token=root) as admin:
                events = [e async for e in admin.iter_audit_events()]
    assert [(e.action, e.space_id, e.subject, e.path, e.bytes_delta) for e in events] == [
        ("memory.global_write", "v1:global:::::handbook", "root", "rules.md", 9)
    ]
