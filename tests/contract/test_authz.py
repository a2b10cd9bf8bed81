"""AuthzService and its enforcement in StorageService, on SQLite and on MongoDB.

Rules (ARCHITECTURE §2): reads for any member of the tenant, global readable by all;
write/delete/import need member or above; global mutations need platform_admin and leave an
audit row; a SpaceRef naming another tenant or user is refused; service principals act for
any tenant; bad tokens are UNAUTHENTICATED, never INTERNAL.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from engram.app.production import authz_on_mongo, storage_on_mongo
from engram.client import (
    AsyncClient,
    EngramError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Space,
    Unauthenticated,
    Unavailable,
)
from engram.v1 import authz_pb2, authz_pb2_grpc, storage_pb2, storage_pb2_grpc
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, refused, secure_deployment
from tests.support.grpc_helpers import fails, space
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = pytest.mark.contract

ADMIN = mint("ada", "acme", "admin")
MEMBER = mint("ann", "acme", "member")
EDITOR = mint("ed", "acme", "config_editor")
VIEWER = mint("vic", "acme", "viewer")
PLATFORM = mint("root", "acme", "admin", platform_admin=True)
OTHER = mint("bob", "globex", "admin")
NOTES = Space(name="notes")
GLOBAL = Space("global", "handbook")


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


def storage(deployment: Deployment, who: str) -> AsyncClient:
    # retries=0: every answer and refusal is the first attempt's.
    return deployment.client("storage", who).with_options(retries=0, space=NOTES)


def authz(deployment: Deployment, who: str = "") -> AsyncClient:
    return deployment.client("authz", who).with_options(retries=0)


def tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def import_into(client: AsyncClient, ref: Space) -> object:
    return await client.import_space(
        tar({"imported.md": b"hello"}), strategy="overwrite", space=ref
    )


@pytest.mark.parametrize("who", [VIEWER, EDITOR])
async def test_mutations_need_member_role(deployment: Deployment, who: str) -> None:
    await storage(deployment, MEMBER).write_document("a.md", "x")
    caller = storage(deployment, who)
    failures = [
        await refused(caller.write_document("b.md", "x"), PermissionDenied),
        await refused(caller.delete_document("a.md"), PermissionDenied),
        await refused(import_into(caller, NOTES), PermissionDenied),
    ]
    assert all(f.rule == "member_role_required" for f in failures)
    read = await caller.read_document("a.md")
    assert read.content == "x", "viewers read"


async def test_members_and_admins_mutate(deployment: Deployment) -> None:
    for who in (MEMBER, ADMIN):
        caller = storage(deployment, who)
        await caller.write_document("a.md", "x")
        await caller.delete_document("a.md")
        await import_into(caller, NOTES)


async def test_global_spaces_read_by_all_changed_by_platform_admins_and_audited(
    deployment: Deployment,
) -> None:
    root = storage(deployment, PLATFORM).with_options(space=GLOBAL)
    failure = await refused(
        storage(deployment, ADMIN).write_document("rules.md", "x", space=GLOBAL),
        PermissionDenied,
    )
    assert failure.rule == "platform_admin_required"
    written = await root.write_document("rules.md", "be kind")
    assert written.document.space_id == "v1:global:::::handbook"
    for reader in (VIEWER, OTHER):
        read = await storage(deployment, reader).read_document("rules.md", space=GLOBAL)
        assert read.content == "be kind"
    await import_into(root, GLOBAL)
    await root.delete_document("rules.md")
    auditor = authz(deployment, PLATFORM)
    await refused(authz(deployment, ADMIN).list_audit_events(), PermissionDenied)
    events = (await auditor.list_audit_events()).items
    assert [(e.action, e.path, e.bytes_delta) for e in events] == [
        ("memory.global_write", "rules.md", 7),
        ("memory.global_import", "imported.md", 5),
        ("memory.global_delete", "rules.md", -7),
    ]
    assert all(e.subject == "root" and e.space_id == "v1:global:::::handbook" for e in events)
    paged = await auditor.list_audit_events(page_size=2)
    assert len(paged.items) == 2 and paged.next_page_token
    rest = await auditor.list_audit_events(page_size=2, page_token=paged.next_page_token)
    assert [e.action for e in rest.items] == ["memory.global_delete"]


async def test_naming_another_tenant_or_user_is_refused(deployment: Deployment) -> None:
    for ref in (Space(name="notes", tenant="globex"), Space("user", "me", user="bob")):
        for who in (MEMBER, PLATFORM):
            failure = await refused(
                storage(deployment, who).write_document("a.md", "x", space=ref), PermissionDenied
            )
            assert failure.rule in ("tenant_mismatch", "user_mismatch")
    mine = Space("user", "me")
    written = await storage(deployment, MEMBER).write_document("a.md", "x", space=mine)
    assert written.document.space.user == "ann"


async def test_service_principals_act_for_any_named_tenant(deployment: Deployment) -> None:
    indexer = storage(deployment, service_token("indexer"))
    await storage(deployment, MEMBER).write_document("a.md", "from acme")
    read = await indexer.read_document("a.md", space=Space(name="notes", tenant="acme"))
    assert read.content == "from acme"
    failure = await refused(indexer.read_document("a.md"), PermissionDenied)
    assert failure.rule == "service_tenant_required"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        mint(ttl=-600),
        mint(secret="wrong-secret-" + "0123456789abcdef" * 4),
        mint(role=None),  # type: ignore[arg-type]
        mint(tenant=None),  # type: ignore[arg-type]
        "egm_0123456789abcdef_forged-secret",
    ],
)
async def test_bad_credentials_are_unauthenticated(deployment: Deployment, token: str) -> None:
    await refused(storage(deployment, token).read_document("a.md"), Unauthenticated)
    quota = deployment.client("quota", token).with_options(retries=0)
    await refused(quota.quota_usage(), Unauthenticated)


async def test_what_the_client_never_sends_is_refused_too(deployment: Deployment) -> None:
    """On the wire: a non-Bearer authorization header is UNAUTHENTICATED, an Authorize
    request without an action INVALID_ARGUMENT (the client sends neither)."""
    basic = (("authorization", "Basic dXNlcjpwYXNz"),)
    wire = storage_pb2_grpc.StorageServiceStub(deployment.channel("storage"))
    read = storage_pb2.ReadDocumentRequest(space=space(), path="a.md")
    await fails(wire.ReadDocument(read, metadata=basic), grpc.StatusCode.UNAUTHENTICATED)
    authorize = authz_pb2_grpc.AuthzServiceStub(deployment.channel("authz")).Authorize
    await fails(
        authorize(authz_pb2.AuthorizeRequest(space=space()), metadata=basic),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    await fails(
        authorize(
            authz_pb2.AuthorizeRequest(space=space()),
            metadata=(("authorization", f"Bearer {MEMBER}"),),
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_personal_access_tokens(deployment: Deployment) -> None:
    admin = authz(deployment, ADMIN)
    await refused(authz(deployment, MEMBER).create_token(role="member"), PermissionDenied)
    await refused(admin.create_token(tenant="globex"), PermissionDenied)
    # A token for another user acts as them: refused unless ENGRAM_ALLOW_ACT_AS.
    for who in (ADMIN, PLATFORM):
        failure = await refused(
            authz(deployment, who).create_token(user="carl"), PermissionDenied, "ACT_AS_DISABLED"
        )
        assert "act as them" in failure.message
    created = await admin.create_token(role="viewer", description="ci bot")
    assert created.token.startswith(f"egm_{created.token_id}_")
    who = await authz(deployment).authenticate(created.token)
    assert (who.subject, who.tenant, who.role) == ("ada", "acme", "viewer")
    await storage(deployment, ADMIN).write_document("a.md", "x")
    bot = storage(deployment, created.token)
    assert (await bot.read_document("a.md")).content == "x"
    await refused(bot.write_document("b.md", "x"), PermissionDenied)
    await refused(authz(deployment, OTHER).revoke_token(created.token_id), NotFound)
    await admin.revoke_token(created.token_id)
    await refused(authz(deployment).authenticate(created.token), Unauthenticated)
    if deployment.backend == "sqlite":
        # Same process: the revocation reaches the storage boundary at once. Across processes
        # it takes up to ENGRAM_AUTH_CACHE_SECONDS.
        await refused(bot.read_document("a.md"), Unauthenticated)


async def test_token_listing(deployment: Deployment) -> None:
    """ListTokens: a tenant admin sees the tenant's tokens (ids, users, roles, expiry,
    revocations, never a secret), paged by id; members and other tenants' admins do not."""
    admin, other = authz(deployment, ADMIN), authz(deployment, OTHER)
    created = [await admin.create_token(role="viewer", description=f"bot {n}") for n in range(3)]
    await admin.revoke_token(created[0].token_id)
    listed = []
    page = ""
    for _ in range(5):
        response = await admin.list_tokens(page_size=2, page_token=page)
        assert len(response.items) <= 2
        listed.extend(response.items)
        page = response.next_page_token
        if not page:
            break
    ids = [info.token_id for info in listed]
    assert ids == sorted(c.token_id for c in created)
    by_id = {info.token_id: info for info in listed}
    first = by_id[created[0].token_id]
    assert first.revoked and first.revoked_at is not None
    rest = by_id[created[1].token_id]
    assert not rest.revoked and rest.revoked_at is None
    assert (rest.user, rest.tenant, rest.role, rest.created_by) == (
        "ada",
        "acme",
        "viewer",
        "ada",
    )
    assert rest.description == "bot 1"
    assert rest.expires_at is not None and created[1].expires_at is not None
    assert int(rest.expires_at.timestamp()) == int(created[1].expires_at.timestamp())
    assert created[1].token not in str(listed)
    assert len((await admin.list_tokens(user="ada")).items) == 3
    assert (await admin.list_tokens(user="carl")).items == ()
    await refused(authz(deployment, MEMBER).list_tokens(), PermissionDenied)
    await refused(other.list_tokens(tenant="acme"), PermissionDenied, "TENANT_MISMATCH")
    assert (await other.list_tokens()).items == ()
    platform = await authz(deployment, PLATFORM).list_tokens(tenant="acme")
    assert len(platform.items) == 3


async def test_act_as_is_explicit_and_audited(tmp_path: Path, real_backends: RealBackends) -> None:
    """With ENGRAM_ALLOW_ACT_AS an admin may mint a token for another user of the tenant;
    each one lands in the audit log naming the admin, the user and the token."""
    async with secure_deployment("sqlite", tmp_path, real_backends, allow_act_as=True) as running:
        mine = Space("user", "diary")
        carl = storage(running, mint("carl", "acme", "member")).with_options(space=mine)
        await carl.write_document("d.md", "carl's notes")
        created = await authz(running, ADMIN).create_token(user="carl", role="viewer")
        read = await storage(running, created.token).read_document("d.md", space=mine)
        assert read.content == "carl's notes"
        await refused(authz(running, MEMBER).create_token(user="carl"), PermissionDenied)
        audit = await authz(running, PLATFORM).list_audit_events(
            since=datetime.fromtimestamp(0, UTC)
        )
        acts = [e for e in audit.items if e.action == "token.act_as"]
        assert [(e.subject, e.tenant) for e in acts] == [("ada", "acme")]
        assert f"user:carl token:{created.token_id}" in acts[0].path


async def test_authorize_reports_decisions(deployment: Deployment) -> None:
    member = authz(deployment, MEMBER)
    allowed = await member.authorize("write", space=Space("user", "me"))
    assert allowed.allowed and allowed.space.tenant == "acme" and allowed.space.user == "ann"
    assert allowed.space_id == "v1:user:acme:::ann:me"
    denial = await authz(deployment, VIEWER).authorize("write", space=NOTES)
    assert not denial.allowed and denial.reason == "member_role_required"
    other = await member.authorize("read", space=Space(name="notes", tenant="globex"))
    assert not other.allowed and other.reason == "tenant_mismatch"
    # An action it does not know is refused before it is sent; no action at all is refused
    # by the server (test_what_the_client_never_sends_is_refused_too).
    await refused(member.authorize("fly", space=NOTES), InvalidArgument)


async def test_record_audit_is_for_services(deployment: Deployment) -> None:
    def record(client: AsyncClient) -> Awaitable[str]:
        return client.record_audit_event(
            "memory.global_write", subject="w", space_id="s", path="p.md", bytes_delta=3
        )

    await refused(record(authz(deployment, PLATFORM)), PermissionDenied)
    assert await record(authz(deployment, service_token("workspace")))


@pytest.mark.real_backend
async def test_services_look_personal_tokens_up_at_authz(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    """Issue 34: AuthzService alone reads personal access tokens. Storage runs here on a
    database without them, so a token it accepts was looked up at authz; a revocation at
    authz reaches storage within ENGRAM_AUTH_CACHE_SECONDS (1 s here), and a token is
    refused as UNAUTHENTICATED when authz does not know it, UNAVAILABLE when authz is away."""
    database = f"engram_{uuid.uuid4().hex[:12]}"
    common = {
        "jwt_secret": TEST_JWT_SECRET,
        "mongo_uri": real_backends.url("mongo"),
        "auth_cache_seconds": 1.0,
    }
    authz_settings = server_settings(tmp_path / "authz", mongo_db=f"{database}_authz", **common)
    async with authz_on_mongo(authz_settings) as authz_server:
        storage_settings = server_settings(
            tmp_path / "storage",
            mongo_db=f"{database}_storage",
            authz_addr=f"127.0.0.1:{authz_server.port}",
            service_token=service_token("storage"),
            **common,
        )
        deployment = Deployment("mongo", {"authz": authz_server.port})
        async with storage_on_mongo(storage_settings, publish_events=False) as storage_server:
            deployment.ports["storage"] = storage_server.port
            admin = authz(deployment, ADMIN)
            await storage(deployment, ADMIN).write_document("a.md", "x")
            created = await admin.create_token(role="viewer")
            bot = storage(deployment, created.token)
            assert (await bot.read_document("a.md")).content == "x"
            forged = storage(deployment, f"egm_{'0' * 16}_{'1' * 32}")
            await refused(forged.read_document("a.md"), Unauthenticated)
            await admin.revoke_token(created.token_id)
            revoked_at = time.monotonic()
            while True:
                try:
                    await bot.read_document("a.md")
                except EngramError as error:
                    assert isinstance(error, Unauthenticated), error
                    break
                assert time.monotonic() - revoked_at < 5, "the revocation never reached storage"
                await asyncio.sleep(0.1)
            second = await admin.create_token(role="viewer")
        # Authz away: a token it has not vouched for is not an unknown token.
        await deployment.close()
        deployment = Deployment("mongo", {})
    async with storage_on_mongo(storage_settings, publish_events=False) as storage_server:
        deployment.ports["storage"] = storage_server.port
        try:
            await refused(storage(deployment, second.token).read_document("a.md"), Unavailable)
        finally:
            await deployment.close()
