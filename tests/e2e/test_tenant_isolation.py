"""Tenant isolation: tenant A, with valid tokens of every role, tries every StorageService
method against tenant B's spaces - by SpaceRef fields, by crafted tenant/user values and by
page tokens taken from B. Zero successes, zero leaked bytes; B's data is untouched."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.v1 import quota_pb2, space_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, secure_deployment
from tests.support.grpc_helpers import space, write_request
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.e2e

B_SECRET_TEXT = "globex launch code is rosebud"
B = bearer(mint("bob", "globex", "admin"))
ATTACKERS = {
    "viewer": bearer(mint("eve", "acme", "viewer")),
    "member": bearer(mint("eve", "acme", "member")),
    "admin": bearer(mint("eve", "acme", "admin")),
    "platform_admin": bearer(mint("eve", "acme", "admin", platform_admin=True)),
}
B_SPACES = {
    "private": space("plans", tenant="globex"),
    "project": space("plans", space_pb2.VISIBILITY_PROJECT, tenant="globex", project="p1"),
    "bot": space("plans", space_pb2.VISIBILITY_BOT, tenant="globex", project="p1", bot="b"),
    "org": space("plans", space_pb2.VISIBILITY_ORG, tenant="globex"),
    "cross_project": space("plans", space_pb2.VISIBILITY_CROSS_PROJECT, tenant="globex"),
    "user": space("plans", space_pb2.VISIBILITY_USER, tenant="globex", user="bob"),
}
# B's user space addressed without a tenant but with B's user: stamped to A's tenant and
# refused because the user is not the caller.
CRAFTED = {
    "user_without_tenant": space("plans", space_pb2.VISIBILITY_USER, user="bob"),
    "user_other_tenant_self": space(
        "plans", space_pb2.VISIBILITY_USER, tenant="globex", user="eve"
    ),
}


def tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(params=BACKENDS)
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, real_backends: RealBackends
) -> AsyncIterator[Deployment]:
    if request.param != "sqlite":
        request.applymarker(pytest.mark.real_backend)
    async with secure_deployment(request.param, tmp_path, real_backends) as running:
        yield running


async def seed_b(deployment: Deployment) -> dict[str, str]:
    """B's documents in every space; returns a page token from B's own listing."""
    storage = deployment.storage()
    tokens: dict[str, str] = {}
    for name, ref in B_SPACES.items():
        for i in range(3):
            await storage.WriteDocument(
                write_request(f"doc{i}.md", B_SECRET_TEXT, ref=_own(ref)), metadata=B
            )
        listing = await storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=_own(ref), page_size=1), metadata=B
        )
        tokens[name] = listing.next_page_token
    return tokens


async def attempt(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    try:
        result = await call
    except grpc.aio.AioRpcError as error:
        assert error.code() not in (
            grpc.StatusCode.OK,
            grpc.StatusCode.INTERNAL,
            grpc.StatusCode.UNKNOWN,
        ), error.details()
        return error
    raise AssertionError(f"tenant A succeeded against tenant B: {result}")


def storage_calls(
    deployment: Deployment, ref: space_pb2.SpaceRef, page_token: str
) -> list[Callable[[tuple[tuple[str, str], ...]], Awaitable[Any]]]:
    storage = deployment.storage()

    async def export(metadata: tuple[tuple[str, str], ...]) -> bytes:
        return b"".join(
            [
                c.data
                async for c in storage.ExportSpace(
                    storage_pb2.ExportSpaceRequest(space=ref), metadata=metadata
                )
            ]
        )

    async def import_(metadata: tuple[tuple[str, str], ...]) -> Any:
        async def messages() -> AsyncIterator[storage_pb2.ImportSpaceRequest]:
            yield storage_pb2.ImportSpaceRequest(
                space=ref, strategy=storage_pb2.IMPORT_STRATEGY_OVERWRITE
            )
            yield storage_pb2.ImportSpaceRequest(data=tar({"doc0.md": b"pwned"}))

        return await storage.ImportSpace(messages(), metadata=metadata)

    return [
        lambda md: storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=ref, path="doc0.md"), metadata=md
        ),
        lambda md: storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=ref, path="doc0.md", version=1), metadata=md
        ),
        lambda md: storage.WriteDocument(write_request("doc0.md", "pwned", ref=ref), metadata=md),
        lambda md: storage.WriteDocument(
            write_request("doc0.md", "pwned", ref=ref, mode=storage_pb2.WRITE_MODE_APPEND),
            metadata=md,
        ),
        lambda md: storage.DeleteDocument(
            storage_pb2.DeleteDocumentRequest(space=ref, path="doc0.md"), metadata=md
        ),
        lambda md: storage.ListDocuments(storage_pb2.ListDocumentsRequest(space=ref), metadata=md),
        lambda md: storage.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=ref, page_size=1, page_token=page_token),
            metadata=md,
        ),
        lambda md: storage.ListDocumentVersions(
            storage_pb2.ListDocumentVersionsRequest(space=ref, path="doc0.md"), metadata=md
        ),
        lambda md: storage.GetUsage(storage_pb2.GetUsageRequest(space=ref), metadata=md),
        export,
        import_,
    ]


async def test_tenant_a_gets_nothing_of_tenant_b(deployment: Deployment) -> None:
    page_tokens = await seed_b(deployment)
    storage = deployment.storage()
    before = {
        name: await storage.GetUsage(storage_pb2.GetUsageRequest(space=_own(ref)), metadata=B)
        for name, ref in B_SPACES.items()
    }
    leaks = [B_SECRET_TEXT, "doc0.md", "doc1", hashlib.sha256(B_SECRET_TEXT.encode()).hexdigest()]
    attempts = 0
    for role, metadata in ATTACKERS.items():
        targets = {**B_SPACES, **CRAFTED}
        for name, ref in targets.items():
            token = page_tokens.get(name, page_tokens["private"])
            for call in storage_calls(deployment, ref, token):
                error = await attempt(call(metadata))
                attempts += 1
                text = (error.details() or "") + repr(error.trailing_metadata())
                for leak in leaks:
                    assert leak not in text, f"{role} on {name}: leaked {leak!r} in {text!r}"
        # B's page tokens on A's own spaces: refused, never a look into B's listing.
        for token in page_tokens.values():
            error = await attempt(
                storage.ListDocuments(
                    storage_pb2.ListDocumentsRequest(
                        space=space("plans"), page_size=1, page_token=token
                    ),
                    metadata=metadata,
                )
            )
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            attempts += 1
        error = (
            await attempt(
                deployment.quota().GetUsage(
                    quota_pb2.QuotaServiceGetUsageRequest(tenant="globex"), metadata=metadata
                )
            )
            if role != "platform_admin"
            else None
        )
        if error is not None:
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert attempts >= 4 * 8 * 11
    for name, ref in B_SPACES.items():
        after = await storage.GetUsage(storage_pb2.GetUsageRequest(space=_own(ref)), metadata=B)
        assert after == before[name], f"B's {name} space changed"
        read = await storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=_own(ref), path="doc0.md"), metadata=B
        )
        assert read.document.content == B_SECRET_TEXT and read.document.version == 1


def _own(ref: space_pb2.SpaceRef) -> space_pb2.SpaceRef:
    own = space_pb2.SpaceRef()
    own.CopyFrom(ref)
    own.ClearField("tenant")
    return own
