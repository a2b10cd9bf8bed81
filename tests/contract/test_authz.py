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
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from engram.app.production import authz_on_mongo, storage_on_mongo
from engram.v1 import authz_pb2, space_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, secure_deployment
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, bearer, mint, service_token

pytestmark = pytest.mark.contract
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED

ADMIN = bearer(mint("ada", "acme", "admin"))
MEMBER = bearer(mint("ann", "acme", "member"))
EDITOR = bearer(mint("ed", "acme", "config_editor"))
VIEWER = bearer(mint("vic", "acme", "viewer"))
PLATFORM = bearer(mint("root", "acme", "admin", platform_admin=True))
OTHER = bearer(mint("bob", "globex", "admin"))
GLOBAL = space("handbook", space_pb2.VISIBILITY_GLOBAL)


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


def tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def import_into(stub: object, ref: space_pb2.SpaceRef, metadata: object) -> object:
    async def messages() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
        yield storage_pb2.ImportSpaceRequest(
            space=ref, strategy=storage_pb2.IMPORT_STRATEGY_OVERWRITE
        )
        yield storage_pb2.ImportSpaceRequest(data=tar({"imported.md": b"hello"}))

    return await stub.ImportSpace(messages(), metadata=metadata)  # type: ignore[attr-defined]


@pytest.mark.parametrize("who", [VIEWER, EDITOR])
async def test_mutations_need_member_role(deployment: Deployment, who: object) -> None:
    storage = deployment.storage()
    await storage.WriteDocument(write_request("a.md", "x"), metadata=MEMBER)
    failures = [
        await fails(storage.WriteDocument(write_request("b.md", "x"), metadata=who), DENIED),
        await fails(
            storage.DeleteDocument(
                storage_pb2.DeleteDocumentRequest(space=space(), path="a.md"), metadata=who
            ),
            DENIED,
        ),
        await fails(import_into(storage, space(), who), DENIED),
    ]
    assert all(f.metadata["rule"] == "member_role_required" for f in failures)
    read = await storage.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=who
    )
    assert read.document.content == "x", "viewers read"


async def test_members_and_admins_mutate(deployment: Deployment) -> None:
    storage = deployment.storage()
    for who in (MEMBER, ADMIN):
        await storage.WriteDocument(write_request("a.md", "x"), metadata=who)
        await storage.DeleteDocument(
            storage_pb2.DeleteDocumentRequest(space=space(), path="a.md"), metadata=who
        )
        await import_into(storage, space(), who)


async def test_global_spaces_read_by_all_changed_by_platform_admins_and_audited(
    deployment: Deployment,
) -> None:
    storage = deployment.storage()
    failure = await fails(
        storage.WriteDocument(write_request("rules.md", "x", ref=GLOBAL), metadata=ADMIN), DENIED
    )
    assert failure.metadata["rule"] == "platform_admin_required"
    written = await storage.WriteDocument(
        write_request("rules.md", "be kind", ref=GLOBAL), metadata=PLATFORM
    )
    assert written.document.space_id == "v1:global:::::handbook"
    for reader in (VIEWER, OTHER):
        read = await storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=GLOBAL, path="rules.md"), metadata=reader
        )
        assert read.document.content == "be kind"
    await import_into(storage, GLOBAL, PLATFORM)
    await storage.DeleteDocument(
        storage_pb2.DeleteDocumentRequest(space=GLOBAL, path="rules.md"), metadata=PLATFORM
    )
    authz = deployment.authz()
    await fails(authz.ListAuditEvents(authz_pb2.ListAuditEventsRequest(), metadata=ADMIN), DENIED)
    events = (
        await authz.ListAuditEvents(authz_pb2.ListAuditEventsRequest(), metadata=PLATFORM)
    ).events
    assert [(e.action, e.path, e.bytes_delta) for e in events] == [
        ("memory.global_write", "rules.md", 7),
        ("memory.global_import", "imported.md", 5),
        ("memory.global_delete", "rules.md", -7),
    ]
    assert all(e.subject == "root" and e.space_id == "v1:global:::::handbook" for e in events)
    later = Timestamp()
    later.FromDatetime(events[-1].at.ToDatetime())
    paged = await authz.ListAuditEvents(
        authz_pb2.ListAuditEventsRequest(page_size=2), metadata=PLATFORM
    )
    assert len(paged.events) == 2 and paged.next_page_token
    rest = await authz.ListAuditEvents(
        authz_pb2.ListAuditEventsRequest(page_size=2, page_token=paged.next_page_token),
        metadata=PLATFORM,
    )
    assert [e.action for e in rest.events] == ["memory.global_delete"]


async def test_naming_another_tenant_or_user_is_refused(deployment: Deployment) -> None:
    storage = deployment.storage()
    for ref in (space(tenant="globex"), space("me", space_pb2.VISIBILITY_USER, user="bob")):
        for who in (MEMBER, PLATFORM):
            failure = await fails(
                storage.WriteDocument(write_request("a.md", "x", ref=ref), metadata=who), DENIED
            )
            assert failure.metadata["rule"] in ("tenant_mismatch", "user_mismatch")
    mine = space("me", space_pb2.VISIBILITY_USER)
    written = await storage.WriteDocument(write_request("a.md", "x", ref=mine), metadata=MEMBER)
    assert written.document.space.user == "ann"


async def test_service_principals_act_for_any_named_tenant(deployment: Deployment) -> None:
    storage = deployment.storage()
    indexer = bearer(service_token("indexer"))
    await storage.WriteDocument(write_request("a.md", "from acme"), metadata=MEMBER)
    read = await storage.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=space(tenant="acme"), path="a.md"), metadata=indexer
    )
    assert read.document.content == "from acme"
    failure = await fails(
        storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=indexer
        ),
        DENIED,
    )
    assert failure.metadata["rule"] == "service_tenant_required"


@pytest.mark.parametrize(
    "metadata",
    [
        (),
        bearer("garbage"),
        bearer(mint(ttl=-600)),
        bearer(mint(secret="wrong-secret-" + "0123456789abcdef" * 4)),
        bearer(mint(role=None)),  # type: ignore[arg-type]
        bearer(mint(tenant=None)),  # type: ignore[arg-type]
        bearer("egm_0123456789abcdef_forged-secret"),
        (("authorization", "Basic dXNlcjpwYXNz"),),
    ],
)
async def test_bad_credentials_are_unauthenticated(
    deployment: Deployment, metadata: tuple[tuple[str, str], ...]
) -> None:
    storage = deployment.storage()
    await fails(
        storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=metadata
        ),
        UNAUTH,
    )
    await fails(
        deployment.quota().GetUsage(
            __import__("engram.v1.quota_pb2", fromlist=["x"]).QuotaServiceGetUsageRequest(),
            metadata=metadata,
        ),
        UNAUTH,
    )


async def test_personal_access_tokens(deployment: Deployment) -> None:
    authz, storage = deployment.authz(), deployment.storage()
    await fails(
        authz.CreateToken(
            authz_pb2.CreateTokenRequest(role=authz_pb2.ROLE_MEMBER), metadata=MEMBER
        ),
        DENIED,
    )
    await fails(
        authz.CreateToken(authz_pb2.CreateTokenRequest(tenant="globex"), metadata=ADMIN), DENIED
    )
    # A token for another user acts as them: refused unless ENGRAM_ALLOW_ACT_AS.
    for metadata in (ADMIN, PLATFORM):
        refused = await fails(
            authz.CreateToken(authz_pb2.CreateTokenRequest(user="carl"), metadata=metadata),
            DENIED,
            "ACT_AS_DISABLED",
        )
        assert "act as them" in refused.message
    created = await authz.CreateToken(
        authz_pb2.CreateTokenRequest(role=authz_pb2.ROLE_VIEWER, description="ci bot"),
        metadata=ADMIN,
    )
    assert created.token.startswith(f"egm_{created.token_id}_")
    who = await authz.Authenticate(authz_pb2.AuthenticateRequest(token=created.token))
    assert (who.principal.subject, who.principal.tenant, who.principal.role) == (
        "ada",
        "acme",
        authz_pb2.ROLE_VIEWER,
    )
    await storage.WriteDocument(write_request("a.md", "x"), metadata=ADMIN)
    read = await storage.ReadDocument(
        storage_pb2.ReadDocumentRequest(space=space(), path="a.md"), metadata=bearer(created.token)
    )
    assert read.document.content == "x"
    await fails(
        storage.WriteDocument(write_request("b.md", "x"), metadata=bearer(created.token)), DENIED
    )
    await fails(
        authz.RevokeToken(authz_pb2.RevokeTokenRequest(token_id=created.token_id), metadata=OTHER),
        grpc.StatusCode.NOT_FOUND,
    )
    await authz.RevokeToken(authz_pb2.RevokeTokenRequest(token_id=created.token_id), metadata=ADMIN)
    await fails(authz.Authenticate(authz_pb2.AuthenticateRequest(token=created.token)), UNAUTH)
    if deployment.backend == "sqlite":
        # Same process: the revocation reaches the storage boundary at once. Across processes
        # it takes up to ENGRAM_AUTH_CACHE_SECONDS.
        await fails(
            storage.ReadDocument(
                storage_pb2.ReadDocumentRequest(space=space(), path="a.md"),
                metadata=bearer(created.token),
            ),
            UNAUTH,
        )


async def test_token_listing(deployment: Deployment) -> None:
    """ListTokens: a tenant admin sees the tenant's tokens (ids, users, roles, expiry,
    revocations, never a secret), paged by id; members and other tenants' admins do not."""
    authz = deployment.authz()
    created = [
        await authz.CreateToken(
            authz_pb2.CreateTokenRequest(role=authz_pb2.ROLE_VIEWER, description=f"bot {n}"),
            metadata=ADMIN,
        )
        for n in range(3)
    ]
    await authz.RevokeToken(
        authz_pb2.RevokeTokenRequest(token_id=created[0].token_id), metadata=ADMIN
    )
    listed = []
    page = ""
    for _ in range(5):
        response = await authz.ListTokens(
            authz_pb2.ListTokensRequest(page_size=2, page_token=page), metadata=ADMIN
        )
        assert len(response.tokens) <= 2
        listed.extend(response.tokens)
        page = response.next_page_token
        if not page:
            break
    ids = [info.token_id for info in listed]
    assert ids == sorted(c.token_id for c in created)
    by_id = {info.token_id: info for info in listed}
    first = by_id[created[0].token_id]
    assert first.revoked and first.revoked_at.seconds > 0
    rest = by_id[created[1].token_id]
    assert not rest.revoked and not rest.HasField("revoked_at")
    assert (rest.user, rest.tenant, rest.role, rest.created_by) == (
        "ada",
        "acme",
        authz_pb2.ROLE_VIEWER,
        "ada",
    )
    assert rest.description == "bot 1"
    assert rest.expires_at.seconds == created[1].expires_at.seconds
    assert created[1].token not in str(listed)
    only_ada = await authz.ListTokens(authz_pb2.ListTokensRequest(user="ada"), metadata=ADMIN)
    assert len(only_ada.tokens) == 3
    nobody = await authz.ListTokens(authz_pb2.ListTokensRequest(user="carl"), metadata=ADMIN)
    assert list(nobody.tokens) == []
    await fails(authz.ListTokens(authz_pb2.ListTokensRequest(), metadata=MEMBER), DENIED)
    await fails(
        authz.ListTokens(authz_pb2.ListTokensRequest(tenant="acme"), metadata=OTHER),
        DENIED,
        "TENANT_MISMATCH",
    )
    assert (
        list((await authz.ListTokens(authz_pb2.ListTokensRequest(), metadata=OTHER)).tokens) == []
    )
    platform = await authz.ListTokens(authz_pb2.ListTokensRequest(tenant="acme"), metadata=PLATFORM)
    assert len(platform.tokens) == 3


async def test_act_as_is_explicit_and_audited(tmp_path: Path, real_backends: RealBackends) -> None:
    """With ENGRAM_ALLOW_ACT_AS an admin may mint a token for another user of the tenant;
    each one lands in the audit log naming the admin, the user and the token."""
    async with secure_deployment("sqlite", tmp_path, real_backends, allow_act_as=True) as running:
        authz, storage = running.authz(), running.storage()
        mine = space("diary", space_pb2.VISIBILITY_USER)
        carl = bearer(mint("carl", "acme", "member"))
        await storage.WriteDocument(write_request("d.md", "carl's notes", ref=mine), metadata=carl)
        created = await authz.CreateToken(
            authz_pb2.CreateTokenRequest(user="carl", role=authz_pb2.ROLE_VIEWER), metadata=ADMIN
        )
        read = await storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=mine, path="d.md"),
            metadata=bearer(created.token),
        )
        assert read.document.content == "carl's notes"
        await fails(
            authz.CreateToken(authz_pb2.CreateTokenRequest(user="carl"), metadata=MEMBER), DENIED
        )
        audit = await authz.ListAuditEvents(
            authz_pb2.ListAuditEventsRequest(since=Timestamp(seconds=0)), metadata=PLATFORM
        )
        acts = [e for e in audit.events if e.action == "token.act_as"]
        assert [(e.subject, e.tenant) for e in acts] == [("ada", "acme")]
        assert f"user:carl token:{created.token_id}" in acts[0].path


async def test_authorize_reports_decisions(deployment: Deployment) -> None:
    authz = deployment.authz()
    allowed = await authz.Authorize(
        authz_pb2.AuthorizeRequest(
            action=authz_pb2.ACTION_WRITE, space=space("me", space_pb2.VISIBILITY_USER)
        ),
        metadata=MEMBER,
    )
    assert allowed.allowed and allowed.space.tenant == "acme" and allowed.space.user == "ann"
    assert allowed.space_id == "v1:user:acme:::ann:me"
    refused = await authz.Authorize(
        authz_pb2.AuthorizeRequest(action=authz_pb2.ACTION_WRITE, space=space()), metadata=VIEWER
    )
    assert not refused.allowed and refused.reason == "member_role_required"
    other = await authz.Authorize(
        authz_pb2.AuthorizeRequest(action=authz_pb2.ACTION_READ, space=space(tenant="globex")),
        metadata=MEMBER,
    )
    assert not other.allowed and other.reason == "tenant_mismatch"
    await fails(
        authz.Authorize(authz_pb2.AuthorizeRequest(space=space()), metadata=MEMBER),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_record_audit_is_for_services(deployment: Deployment) -> None:
    authz = deployment.authz()
    event = authz_pb2.AuditEvent(
        action="memory.global_write", subject="w", space_id="s", path="p.md", bytes_delta=3
    )
    await fails(
        authz.RecordAuditEvent(authz_pb2.RecordAuditEventRequest(event=event), metadata=PLATFORM),
        DENIED,
    )
    recorded = await authz.RecordAuditEvent(
        authz_pb2.RecordAuditEventRequest(event=event), metadata=bearer(service_token("workspace"))
    )
    assert recorded.event_id


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
            authz, storage = deployment.authz(), deployment.storage()
            await storage.WriteDocument(write_request("a.md", "x"), metadata=ADMIN)
            created = await authz.CreateToken(
                authz_pb2.CreateTokenRequest(role=authz_pb2.ROLE_VIEWER), metadata=ADMIN
            )
            read = storage_pb2.ReadDocumentRequest(space=space(), path="a.md")
            found = await storage.ReadDocument(read, metadata=bearer(created.token))
            assert found.document.content == "x"
            await fails(
                storage.ReadDocument(read, metadata=bearer(f"egm_{'0' * 16}_{'1' * 32}")),
                UNAUTH,
            )
            await authz.RevokeToken(
                authz_pb2.RevokeTokenRequest(token_id=created.token_id), metadata=ADMIN
            )
            revoked_at = time.monotonic()
            while True:
                try:
                    await storage.ReadDocument(read, metadata=bearer(created.token))
                except grpc.aio.AioRpcError as refused:
                    assert refused.code() == UNAUTH, refused.details()
                    break
                assert time.monotonic() - revoked_at < 5, "the revocation never reached storage"
                await asyncio.sleep(0.1)
            second = await authz.CreateToken(
                authz_pb2.CreateTokenRequest(role=authz_pb2.ROLE_VIEWER), metadata=ADMIN
            )
        # Authz away: a token it has not vouched for is not an unknown token.
        await deployment.close()
        deployment = Deployment("mongo", {})
    async with storage_on_mongo(storage_settings, publish_events=False) as storage_server:
        deployment.ports["storage"] = storage_server.port
        try:
            await fails(
                deployment.storage().ReadDocument(read, metadata=bearer(second.token)),
                grpc.StatusCode.UNAVAILABLE,
            )
        finally:
            await deployment.close()
