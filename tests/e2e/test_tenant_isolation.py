"""Tenant isolation: tenant A, with valid tokens of every role, tries every StorageService
method against tenant B's spaces - by SpaceRef fields, by crafted tenant/user values and by
page tokens taken from B. Zero successes, zero leaked bytes; B's data is untouched."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from engram.client import (
    AsyncClient,
    EngramError,
    InvalidArgument,
    PermissionDenied,
    Space,
    status_name,
)
from tests.support.backends import RealBackends
from tests.support.deployments import BACKENDS, Deployment, secure_deployment
from tests.support.tokens import mint

pytestmark = pytest.mark.e2e

B_SECRET_TEXT = "globex launch code is rosebud"
B = mint("bob", "globex", "admin")
ATTACKERS = {
    "viewer": mint("eve", "acme", "viewer"),
    "member": mint("eve", "acme", "member"),
    "admin": mint("eve", "acme", "admin"),
    "platform_admin": mint("eve", "acme", "admin", platform_admin=True),
}
B_SPACES = {
    "private": Space("private", "plans", tenant="globex"),
    "project": Space("project", "plans", tenant="globex", project="p1"),
    "bot": Space("bot", "plans", tenant="globex", project="p1", bot="b"),
    "org": Space("org", "plans", tenant="globex"),
    "cross_project": Space("cross_project", "plans", tenant="globex"),
    "user": Space("user", "plans", tenant="globex", user="bob"),
}
# B's user space addressed without a tenant but with B's user: stamped to A's tenant and
# refused because the user is not the caller.
CRAFTED = {
    "user_without_tenant": Space("user", "plans", user="bob"),
    "user_other_tenant_self": Space("user", "plans", tenant="globex", user="eve"),
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
    bob = deployment.client("storage", B)
    tokens: dict[str, str] = {}
    for name, ref in B_SPACES.items():
        for i in range(3):
            await bob.write_document(f"doc{i}.md", B_SECRET_TEXT, space=_own(ref))
        listing = await bob.list_documents(page_size=1, space=_own(ref))
        tokens[name] = listing.next_page_token
    return tokens


async def attempt(call: Awaitable[Any]) -> EngramError:
    try:
        result = await call
    except EngramError as error:
        assert status_name(error) not in ("OK", "INTERNAL", "UNKNOWN"), error.message
        return error
    raise AssertionError(f"tenant A succeeded against tenant B: {result}")


def storage_calls(ref: Space, page_token: str) -> list[Callable[[AsyncClient], Awaitable[Any]]]:
    async def export(eve: AsyncClient) -> bytes:
        return b"".join([chunk async for chunk in eve.export_chunks(space=ref)])

    return [
        lambda eve: eve.read_document("doc0.md", space=ref),
        lambda eve: eve.read_document("doc0.md", version=1, space=ref),
        lambda eve: eve.write_document("doc0.md", "pwned", space=ref),
        lambda eve: eve.write_document("doc0.md", "pwned", append=True, space=ref),
        lambda eve: eve.delete_document("doc0.md", space=ref),
        lambda eve: eve.list_documents(space=ref),
        lambda eve: eve.list_documents(page_size=1, page_token=page_token, space=ref),
        lambda eve: eve.list_document_versions("doc0.md", space=ref),
        lambda eve: eve.get_usage(space=ref),
        export,
        lambda eve: eve.import_space(tar({"doc0.md": b"pwned"}), strategy="overwrite", space=ref),
    ]


async def test_tenant_a_gets_nothing_of_tenant_b(deployment: Deployment) -> None:
    page_tokens = await seed_b(deployment)
    bob = deployment.client("storage", B)
    before = {name: await bob.get_usage(space=_own(ref)) for name, ref in B_SPACES.items()}
    leaks = [B_SECRET_TEXT, "doc0.md", "doc1", hashlib.sha256(B_SECRET_TEXT.encode()).hexdigest()]
    attempts = 0
    for role, token in ATTACKERS.items():
        # retries=0: each refusal is the server's first answer.
        eve = deployment.client("storage", token).with_options(retries=0)
        targets = {**B_SPACES, **CRAFTED}
        for name, ref in targets.items():
            page_token = page_tokens.get(name, page_tokens["private"])
            for call in storage_calls(ref, page_token):
                error = await attempt(call(eve))
                attempts += 1
                # What the caller is told: the message and every detail the error carries.
                text = error.message + repr(vars(error))
                for leak in leaks:
                    assert leak not in text, f"{role} on {name}: leaked {leak!r} in {text!r}"
        # B's page tokens on A's own spaces: refused, never a look into B's listing.
        for page_token in page_tokens.values():
            error = await attempt(
                eve.list_documents(page_size=1, page_token=page_token, space=Space(name="plans"))
            )
            assert isinstance(error, InvalidArgument), error
            attempts += 1
        if role != "platform_admin":
            quota = deployment.client("quota", token).with_options(retries=0)
            error = await attempt(quota.quota_usage(tenant="globex"))
            assert isinstance(error, PermissionDenied), error
    assert attempts >= 4 * 8 * 11
    for name, ref in B_SPACES.items():
        after = await bob.get_usage(space=_own(ref))
        assert after == before[name], f"B's {name} space changed"
        read = await bob.read_document("doc0.md", space=_own(ref))
        assert read.content == B_SECRET_TEXT and read.version == 1


def _own(ref: Space) -> Space:
    return dataclasses.replace(ref, tenant="")
