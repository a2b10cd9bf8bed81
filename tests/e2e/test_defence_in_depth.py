"""Defence in depth (issue 13): even if the policy stamped a space with the wrong tenant (a bug
in stamping or id construction), every space-wide query - list, export, usage, search legs -
is refused, because the space id about to be queried must carry the caller's own tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram.authz import enforcement
from engram.client import PermissionDenied, Space
from engram.domain.policy import Decision, decide
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from tests.support.backends import RealBackends
from tests.support.deployments import Deployment, secure_deployment
from tests.support.tokens import mint

pytestmark = pytest.mark.e2e

SECRET = "globex plans: rosebud"
BOB_TOKEN = mint("bob", "globex", "admin")
EVE_TOKEN = mint("eve", "acme", "admin")
NOTES = Space(name="notes")


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    async with secure_deployment("sqlite", tmp_path, real_backends, whole_dev=True) as running:
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
    bob = deployment.client("storage", BOB_TOKEN)
    await bob.write_document("plans.md", SECRET, space=NOTES)
    monkeypatch.setattr(enforcement, "decide", buggy_decide)
    eve = deployment.client("storage", EVE_TOKEN).with_options(space=NOTES)

    async def export() -> bytes:
        return b"".join([chunk async for chunk in eve.export_chunks()])

    with pytest.raises(PermissionDenied) as listing:
        await eve.list_documents()
    assert listing.value.info_reason == "TENANT_MISMATCH"
    with pytest.raises(PermissionDenied) as exported:
        await export()
    assert exported.value.info_reason == "TENANT_MISMATCH"
    with pytest.raises(PermissionDenied):
        await eve.get_usage()
    with pytest.raises(PermissionDenied):
        await eve.read_document("plans.md")
    with pytest.raises(PermissionDenied):
        await eve.search("rosebud")
    # Global spaces are shared by design and stay readable.
    await eve.list_documents(space=Space("global", name="shared"))
