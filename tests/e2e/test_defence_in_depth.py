"""Defence in depth (issue 13): even if the policy stamped a space with the wrong tenant (a bug
in stamping or id construction), every space-wide query - list, export, usage, search legs -
is refused, because the space id about to be queried must carry the caller's own tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engram.authz import enforcement
from engram.client import AsyncClient, PermissionDenied, Space
from engram.domain.policy import Decision, decide
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.v1 import space_pb2, storage_pb2
from tests.support.backends import RealBackends
from tests.support.deployments import Deployment, secure_deployment
from tests.support.grpc_helpers import fails, space, write_request
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.e2e

SECRET = "globex plans: rosebud"
BOB = bearer(mint("bob", "globex", "admin"))
EVE_TOKEN = mint("eve", "acme", "admin")
EVE = bearer(EVE_TOKEN)


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    async with secure_deployment("sqlite", tmp_path, real_backends) as running:
        yield running


def buggy_decide(principal: Principal, action: Action, requested: SpaceRef) -> Decision:
    """A broken policy: eve's requests are stamped with tenant globex."""
    decision = decide(principal, action, requested)
    if principal.subject == "eve" and decision.space is not None:
        wrong = decision.space.with_identity(tenant="globex", user=decision.space.user)
        return Decision(allowed=True, rule="", message="", space=wrong)
    return decision


async def test_a_mis_stamped_space_is_refused_before_any_query(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = deployment.storage()
    await storage.WriteDocument(write_request("plans.md", SECRET), metadata=BOB)
    monkeypatch.setattr(enforcement, "decide", buggy_decide)
    denied = grpc.StatusCode.PERMISSION_DENIED

    async def export() -> bytes:
        request = storage_pb2.ExportSpaceRequest(space=space())
        return b"".join([c.data async for c in storage.ExportSpace(request, metadata=EVE)])

    await fails(
        storage.ListDocuments(storage_pb2.ListDocumentsRequest(space=space()), metadata=EVE),
        denied,
        "TENANT_MISMATCH",
    )
    await fails(export(), denied, "TENANT_MISMATCH")
    await fails(storage.GetUsage(storage_pb2.GetUsageRequest(space=space()), metadata=EVE), denied)
    await fails(
        storage.ReadDocument(
            storage_pb2.ReadDocumentRequest(space=space(), path="plans.md"), metadata=EVE
        ),
        denied,
    )
    addr = f"127.0.0.1:{deployment.ports['storage']}"
    async with AsyncClient(addr, token=EVE_TOKEN, space=Space(name="notes")) as eve:
        with pytest.raises(PermissionDenied):
            await eve.search("rosebud")
    # Global spaces are shared by design and stay readable.
    shared = space("shared", space_pb2.VISIBILITY_GLOBAL)
    await storage.ListDocuments(storage_pb2.ListDocumentsRequest(space=shared), metadata=EVE)
