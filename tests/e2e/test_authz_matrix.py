"""The authorization matrix, generated from the policy table (engram.domain.policy.RPC_POLICY):
every served RPC x every role (viewer, config_editor, member, admin, org admin, platform
admin, service)
x every target the table names (own tenant, other tenant, global space, instance), called
over gRPC against `engram dev --auth` (in process). A row admitting the caller must pass
authorization (any answer but PERMISSION_DENIED / UNAUTHENTICATED / INTERNAL); a row refusing
it must be PERMISSION_DENIED (NOT_FOUND where the rule hides the target's existence).

A served RPC without a row, or a row without a call here, fails the test: a new RPC cannot
forget its rule.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from engram.authz.sqlite_tokens import SqliteTokenStore
from engram.authz.tokens import StoredToken, hash_token, new_personal_token
from engram.client import PermissionDenied
from engram.domain.policy import RPC_POLICY, Target, Who, admits
from engram.domain.principals import Principal, Role
from engram.domain.spaces import SpaceRef, Visibility
from engram.runtime.server import served_methods
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    maintenance_pb2,
    maintenance_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
    space_pb2,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from tests.support.backends import RealBackends
from tests.support.deployments import Deployment, secure_deployment
from tests.support.grpc_helpers import space, write_request
from tests.support.tokens import bearer, mint, service_token

pytestmark = pytest.mark.e2e

OWN, OTHER = "acme", "globex"
# Each tenant's org (set up before the matrix runs): SetOrgQuota's OWN target is the org of
# the caller's team, OTHER another org.
ORGS = {OWN: "acme-org", OTHER: "globex-org"}
ROLES: dict[str, tuple[Principal, str]] = {
    "viewer": (Principal("vic", OWN, Role.VIEWER), mint("vic", OWN, "viewer")),
    "config_editor": (
        Principal("ed", OWN, Role.CONFIG_EDITOR),
        mint("ed", OWN, "config_editor"),
    ),
    "member": (Principal("ann", OWN, Role.MEMBER), mint("ann", OWN, "member")),
    "admin": (Principal("ada", OWN, Role.ADMIN), mint("ada", OWN, "admin")),
    "org_admin": (Principal("olga", OWN, Role.ORG_ADMIN), mint("olga", OWN, "org_admin")),
    "platform_admin": (
        Principal("root", OWN, Role.ADMIN, platform_admin=True),
        mint("root", OWN, "admin", platform_admin=True),
    ),
    "service": (Principal("indexer", "", Role.ADMIN, service=True), service_token("indexer")),
}
# RPCs that may refuse with NOT_FOUND, so as not to reveal whether the target exists (a
# token outside the caller's tenant).
HIDDEN = {"/engram.v1.AuthzService/RevokeToken"}
REFUSED = (grpc.StatusCode.PERMISSION_DENIED,)
NEVER = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


def target_space(target: Target, service: bool) -> space_pb2.SpaceRef:
    if target is Target.GLOBAL:
        return space("shared", space_pb2.VISIBILITY_GLOBAL)
    if target is Target.OTHER:
        return space("notes", tenant=OTHER)
    return space("notes", tenant=OWN if service else "")


def target_space_id(target: Target) -> str:
    """The id of target_space's space (an id always names its tenant)."""
    if target is Target.GLOBAL:
        return SpaceRef.create(Visibility.GLOBAL, tenant="", name="shared").id
    return SpaceRef.create(
        Visibility.PRIVATE, tenant=OTHER if target is Target.OTHER else OWN, name="notes"
    ).id


def target_tenant(target: Target, service: bool) -> str:
    if target is Target.INSTANCE:
        return "instance"
    if target is Target.OTHER:
        return OTHER
    return OWN if service else ""


def one_doc_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("imported.md")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    return buffer.getvalue()


Call = Callable[[Target, bool, tuple[tuple[str, str], ...], str], Awaitable[Any]]


def calls(deployment: Deployment) -> dict[str, Call]:
    """One call per RPC, aimed at a target; (target, is_service, metadata, raw token)."""
    channel = deployment.channel("storage")
    storage = storage_pb2_grpc.StorageServiceStub(channel)
    quota = quota_pb2_grpc.QuotaServiceStub(channel)
    authz = authz_pb2_grpc.AuthzServiceStub(channel)
    indexer = indexer_pb2_grpc.IndexerServiceStub(channel)
    search = search_pb2_grpc.SearchServiceStub(channel)
    workspace = workspace_pb2_grpc.WorkspaceServiceStub(channel)
    maintenance = maintenance_pb2_grpc.MaintenanceServiceStub(channel)
    store = SqliteTokenStore(deployment.engram.database)

    async def export(t: Target, svc: bool, md: Any, _: str) -> Any:
        request = storage_pb2.ExportSpaceRequest(space=target_space(t, svc))
        return [c async for c in storage.ExportSpace(request, metadata=md)]

    async def watch(t: Target, svc: bool, md: Any, _: str) -> Any:
        # The first message (caught_up or a change) proves the watch was admitted.
        call = storage.WatchSpace(
            storage_pb2.WatchSpaceRequest(space=target_space(t, svc), from_start=True),
            metadata=md,
        )
        try:
            return await call.read()
        finally:
            call.cancel()

    async def import_(t: Target, svc: bool, md: Any, _: str) -> Any:
        async def messages() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
            yield storage_pb2.ImportSpaceRequest(
                space=target_space(t, svc), strategy=storage_pb2.IMPORT_STRATEGY_OVERWRITE
            )
            yield storage_pb2.ImportSpaceRequest(data=one_doc_archive())

        return await storage.ImportSpace(messages(), metadata=md)

    async def revoke(t: Target, svc: bool, md: Any, _: str) -> Any:
        token, token_id = new_personal_token()
        now = datetime.now(UTC)
        await store.insert(
            StoredToken(
                token_id=token_id,
                token_hash=hash_token(token),
                tenant=OTHER if t is Target.OTHER else OWN,
                user="zed",
                role=Role.VIEWER,
                expires_at=now + timedelta(days=1),
                created_at=now,
                created_by="matrix",
            )
        )
        return await authz.RevokeToken(authz_pb2.RevokeTokenRequest(token_id=token_id), metadata=md)

    def job_runs(t: Target, svc: bool, md: Any, _: str) -> Awaitable[Any]:
        if t is Target.INSTANCE:
            return maintenance.ListJobRuns(maintenance_pb2.ListJobRunsRequest(), metadata=md)
        return maintenance.ListJobRuns(
            maintenance_pb2.ListJobRunsRequest(space=target_space(t, svc)), metadata=md
        )

    def reindex(t: Target, svc: bool, md: Any, _: str) -> Awaitable[Any]:
        if t is Target.INSTANCE:
            return indexer.Reindex(indexer_pb2.ReindexRequest(all=True), metadata=md)
        return indexer.Reindex(
            indexer_pb2.ReindexRequest(spaces=[target_space(t, svc)]), metadata=md
        )

    S = target_space
    return {
        "/engram.v1.StorageService/ReadDocument": lambda t, s, md, _: storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=S(t, s), path="a.md"), metadata=md
        ),
        "/engram.v1.StorageService/WriteDocument": lambda t, s, md, _: storage.WriteDocument(
            write_request("a.md", "matrix", ref=S(t, s)), metadata=md
        ),
        "/engram.v1.StorageService/DeleteDocument": lambda t, s, md, _: storage.DeleteDocument(
            storage_pb2.DeleteDocumentRequest(space=S(t, s), path="gone.md"), metadata=md
        ),
        "/engram.v1.StorageService/ListDocuments": lambda t, s, md, _: storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.StorageService/ListDocumentVersions": (
            lambda t, s, md, _: storage.ListDocumentVersions(
                storage_pb2.ListDocumentVersionsRequest(space=S(t, s), path="a.md"), metadata=md
            )
        ),
        "/engram.v1.StorageService/GetUsage": lambda t, s, md, _: storage.GetUsage(
            storage_pb2.GetUsageRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.StorageService/ExportSpace": export,
        "/engram.v1.StorageService/ImportSpace": import_,
        "/engram.v1.StorageService/PurgeDocument": lambda t, s, md, _: storage.PurgeDocument(
            storage_pb2.PurgeDocumentRequest(space=S(t, s), path="never.md"), metadata=md
        ),
        # A wrong confirmation: INVALID_ARGUMENT once authorized, and nothing is erased.
        "/engram.v1.StorageService/DeleteSpace": lambda t, s, md, _: storage.DeleteSpace(
            storage_pb2.DeleteSpaceRequest(space=S(t, s), confirm_space_id="not-this-one"),
            metadata=md,
        ),
        "/engram.v1.StorageService/ListAllDocuments": lambda t, s, md, _: storage.ListAllDocuments(
            storage_pb2.ListAllDocumentsRequest(page_size=1), metadata=md
        ),
        "/engram.v1.StorageService/ListSpaces": lambda t, s, md, _: storage.ListSpaces(
            storage_pb2.ListSpacesRequest(
                tenant="" if t is Target.GLOBAL else target_tenant(t, s),
                **{"global": t is Target.GLOBAL},
            ),
            metadata=md,
        ),
        "/engram.v1.StorageService/WatchSpace": watch,
        "/engram.v1.StorageService/GetStoredUsage": lambda t, s, md, _: storage.GetStoredUsage(
            storage_pb2.GetStoredUsageRequest(space_id=target_space_id(t)), metadata=md
        ),
        "/engram.v1.StorageService/SumStoredUsage": lambda t, s, md, _: storage.SumStoredUsage(
            storage_pb2.SumStoredUsageRequest(
                tenant="" if t is Target.GLOBAL else OTHER if t is Target.OTHER else OWN,
                **{"global": t is Target.GLOBAL},
            ),
            metadata=md,
        ),
        "/engram.v1.StorageService/PruneVersions": lambda t, s, md, _: storage.PruneVersions(
            storage_pb2.PruneVersionsRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.StorageService/ListAllSpaces": lambda t, s, md, _: storage.ListAllSpaces(
            storage_pb2.ListAllSpacesRequest(), metadata=md
        ),
        "/engram.v1.StorageService/ScanDocuments": lambda t, s, md, _: storage.ScanDocuments(
            storage_pb2.ScanDocumentsRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.SearchService/Search": lambda t, s, md, _: search.Search(
            search_pb2.SearchRequest(spaces=[S(t, s)], query="matrix"), metadata=md
        ),
        "/engram.v1.WorkspaceService/MemoryWrite": lambda t, s, md, _: workspace.MemoryWrite(
            workspace_pb2.MemoryWriteRequest(
                space=S(t, s), target=workspace_pb2.MEMORY_TARGET_MEMORY, content="matrix"
            ),
            metadata=md,
        ),
        "/engram.v1.WorkspaceService/MemoryRead": lambda t, s, md, _: workspace.MemoryRead(
            workspace_pb2.MemoryReadRequest(space=S(t, s), path="MEMORY.md"), metadata=md
        ),
        "/engram.v1.WorkspaceService/MemoryTree": lambda t, s, md, _: workspace.MemoryTree(
            workspace_pb2.MemoryTreeRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.WorkspaceService/MemorySearch": lambda t, s, md, _: workspace.MemorySearch(
            workspace_pb2.MemorySearchRequest(space=S(t, s), query="matrix"), metadata=md
        ),
        "/engram.v1.WorkspaceService/AppendDailyLog": (
            lambda t, s, md, _: workspace.AppendDailyLog(
                workspace_pb2.AppendDailyLogRequest(space=S(t, s), entry="matrix"), metadata=md
            )
        ),
        "/engram.v1.WorkspaceService/GetSystemPrompt": (
            lambda t, s, md, _: workspace.GetSystemPrompt(
                workspace_pb2.GetSystemPromptRequest(space=S(t, s)), metadata=md
            )
        ),
        "/engram.v1.WorkspaceService/SeedWorkspace": lambda t, s, md, _: workspace.SeedWorkspace(
            workspace_pb2.SeedWorkspaceRequest(space=S(t, s)), metadata=md
        ),
        "/engram.v1.WorkspaceService/CompleteBootstrap": (
            lambda t, s, md, _: workspace.CompleteBootstrap(
                workspace_pb2.CompleteBootstrapRequest(space=S(t, s)), metadata=md
            )
        ),
        "/engram.v1.IndexerService/Reindex": reindex,
        "/engram.v1.IndexerService/GetIndexStatus": lambda t, s, md, _: indexer.GetIndexStatus(
            indexer_pb2.GetIndexStatusRequest(), metadata=md
        ),
        "/engram.v1.IndexerService/GetIndexProgress": lambda t, s, md, _: indexer.GetIndexProgress(
            indexer_pb2.GetIndexProgressRequest(
                leg=indexer_pb2.INDEX_LEG_KEYWORD,
                documents=[
                    indexer_pb2.IndexProgressKey(space_id="s", path="a.md", document_id="d")
                ],
            ),
            metadata=md,
        ),
        "/engram.v1.QuotaService/Charge": lambda t, s, md, _: quota.Charge(
            quota_pb2.ChargeRequest(space=S(t, s), delta_bytes=0, idempotency_key=uuid.uuid4().hex),
            metadata=md,
        ),
        "/engram.v1.QuotaService/GetUsage": lambda t, s, md, _: quota.GetUsage(
            quota_pb2.QuotaServiceGetUsageRequest(tenant=target_tenant(t, s)), metadata=md
        ),
        "/engram.v1.QuotaService/SetTenantQuota": lambda t, s, md, _: quota.SetTenantQuota(
            quota_pb2.SetTenantQuotaRequest(tenant=target_tenant(t, s) or OWN, quota_bytes=1 << 30),
            metadata=md,
        ),
        # Empty org = the caller's team's org (a service has no team: it names acme's).
        "/engram.v1.QuotaService/SetOrgQuota": lambda t, s, md, _: quota.SetOrgQuota(
            quota_pb2.SetOrgQuotaRequest(
                org=ORGS[OTHER] if t is Target.OTHER else (ORGS[OWN] if s else ""),
                quota_bytes=1 << 30,
            ),
            metadata=md,
        ),
        "/engram.v1.QuotaService/SetTenantOrg": lambda t, s, md, _: quota.SetTenantOrg(
            quota_pb2.SetTenantOrgRequest(
                tenant=OTHER if t is Target.OTHER else OWN,
                org=ORGS[OTHER if t is Target.OTHER else OWN],
            ),
            metadata=md,
        ),
        "/engram.v1.QuotaService/Reconcile": lambda t, s, md, _: quota.Reconcile(
            quota_pb2.ReconcileRequest(tenant=target_tenant(t, s)), metadata=md
        ),
        "/engram.v1.AuthzService/Authenticate": lambda t, s, md, token: authz.Authenticate(
            authz_pb2.AuthenticateRequest(token=token)
        ),
        "/engram.v1.AuthzService/Authorize": lambda t, s, md, _: authz.Authorize(
            authz_pb2.AuthorizeRequest(action=authz_pb2.ACTION_READ, space=S(t, s)), metadata=md
        ),
        "/engram.v1.AuthzService/CreateToken": lambda t, s, md, _: authz.CreateToken(
            authz_pb2.CreateTokenRequest(
                role=authz_pb2.ROLE_VIEWER, tenant=OTHER if t is Target.OTHER else ""
            ),
            metadata=md,
        ),
        "/engram.v1.AuthzService/RevokeToken": revoke,
        "/engram.v1.AuthzService/ListTokens": lambda t, s, md, _: authz.ListTokens(
            authz_pb2.ListTokensRequest(tenant=OTHER if t is Target.OTHER else ""), metadata=md
        ),
        "/engram.v1.AuthzService/ListAuditEvents": lambda t, s, md, _: authz.ListAuditEvents(
            authz_pb2.ListAuditEventsRequest(since=Timestamp(seconds=0)), metadata=md
        ),
        "/engram.v1.MaintenanceService/ListJobRuns": job_runs,
        # No job is configured here: an admitted call is refused as INVALID_ARGUMENT.
        "/engram.v1.MaintenanceService/RunJob": lambda t, s, md, _: maintenance.RunJob(
            maintenance_pb2.RunJobRequest(job="matrix", space=S(t, s)), metadata=md
        ),
        "/engram.v1.MaintenanceService/GetSpaceMaintenance": (
            lambda t, s, md, _: maintenance.GetSpaceMaintenance(
                maintenance_pb2.GetSpaceMaintenanceRequest(space=S(t, s)), metadata=md
            )
        ),
        "/engram.v1.MaintenanceService/SetSpaceMaintenance": (
            lambda t, s, md, _: maintenance.SetSpaceMaintenance(
                maintenance_pb2.SetSpaceMaintenanceRequest(
                    space=S(t, s), settings=maintenance_pb2.SpaceMaintenance(dream_enabled=True)
                ),
                metadata=md,
            )
        ),
        "/engram.v1.AuthzService/RecordAuditEvent": lambda t, s, md, _: authz.RecordAuditEvent(
            authz_pb2.RecordAuditEventRequest(
                event=authz_pb2.AuditEvent(action="test.matrix", subject="m", space_id="s")
            ),
            metadata=md,
        ),
    }


async def outcome(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    async with secure_deployment("sqlite", tmp_path, real_backends, whole_dev=True) as running:
        platform = running.client("quota", ROLES["platform_admin"][1])
        for tenant, org in ORGS.items():
            await platform.set_tenant_org(tenant, org)
        yield running


async def test_every_rpc_role_and_target_follows_the_policy_table(
    deployment: Deployment,
) -> None:
    served = served_methods(deployment.engram.server.services)
    unlisted = [m for m in served if m not in RPC_POLICY]
    assert not unlisted, f"served RPCs with no row in RPC_POLICY: {unlisted}"
    table = calls(deployment)
    missing = [m for m in served if m not in table]
    assert not missing, f"RPCs with no call in this matrix: {missing}"
    wrong: list[str] = []
    checked = 0
    for method in served:
        for target, who in RPC_POLICY[method].items():
            for role, (principal, token) in ROLES.items():
                code, details = await outcome(
                    table[method](target, principal.service, bearer(token), token)
                )
                allowed = admits(who, principal, target)
                refused_codes = (
                    (*REFUSED, grpc.StatusCode.NOT_FOUND) if method in HIDDEN else REFUSED
                )
                ok = (
                    code not in (*NEVER, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
                    if allowed
                    else code in refused_codes
                )
                checked += 1
                if not ok:
                    expectation = "admitted" if allowed else "refused"
                    wrong.append(
                        f"{method} {target.value} as {role}: expected {expectation} "
                        f"({who.value}), got {code.name} {details[:100]}"
                    )
    assert not wrong, "\n".join(wrong)
    assert checked >= len(served) * len(ROLES)


def test_every_who_is_decided() -> None:
    """Each rule kind admits someone and refuses someone (the trivial kinds aside)."""
    for who in Who:
        results = {
            admits(who, principal, target) for principal, _ in ROLES.values() for target in Target
        }
        expected = {False} if who is Who.NOBODY else None
        expected = {True} if who in (Who.CREDENTIAL, Who.ANYONE) else expected
        assert results == expected if expected else results == {True, False}, who


async def test_tenant_admin_cannot_reconcile_the_instance(deployment: Deployment) -> None:
    with pytest.raises(PermissionDenied, match="platform admin"):
        await deployment.client("quota", ROLES["admin"][1]).reconcile("instance")
    platform = deployment.client("quota", ROLES["platform_admin"][1])
    assert (await platform.reconcile("instance")).spaces_checked >= 0
