"""GrpcQuotaGate (storage's client of a remote QuotaService) against the real service:
which failures it retries, how often, and that a retried charge applies once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.domain.errors import EngramError, QuotaExceeded, Unavailable
from engram.domain.spaces import SpaceRef, Visibility
from engram.quota.client import RETRIES, GrpcQuotaGate
from tests.support.backends import RealBackends
from tests.support.deployments import Deployment, secure_deployment
from tests.support.tokens import mint, service_token

pytestmark = pytest.mark.contract

SPACE = SpaceRef.create(Visibility.PRIVATE, tenant="acme", name="notes")


class Faults(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets each call reach the service, then reports `fail(call_number)` instead of its
    answer when that returns a code (as when the answer is lost on the way back)."""

    def __init__(self, fail: Callable[[int], grpc.StatusCode | None]) -> None:
        self.fail = fail
        self.calls = 0

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        self.calls += 1
        call = await continuation(client_call_details, request)
        code = self.fail(self.calls)
        if code is None:
            return call
        await call
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "injected")


@pytest.fixture
async def deployment(tmp_path: Path, real_backends: RealBackends) -> AsyncIterator[Deployment]:
    async with secure_deployment("sqlite", tmp_path, real_backends, quota_private=1000) as running:
        yield running


async def gate_with(
    deployment: Deployment, faults: Faults, token: str | None = None
) -> tuple[GrpcQuotaGate, grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{deployment.ports['quota']}", interceptors=[faults]
    )
    return GrpcQuotaGate(channel, token or service_token("storage"), timeout=5.0), channel


async def test_a_charge_whose_answer_was_lost_is_retried_and_applies_once(
    deployment: Deployment,
) -> None:
    faults = Faults(lambda n: grpc.StatusCode.UNAVAILABLE if n <= RETRIES - 1 else None)
    gate, channel = await gate_with(deployment, faults)
    try:
        await gate.charge(SPACE, 100, "write-1")
        assert faults.calls == RETRIES
        usage = await gate.usage(SPACE)
    finally:
        await channel.close()
    assert usage.space_used_bytes == 100, "every attempt reached the service; one applied"


async def test_an_unreachable_service_is_unavailable_after_the_retries(
    deployment: Deployment,
) -> None:
    faults = Faults(lambda n: grpc.StatusCode.DEADLINE_EXCEEDED)
    gate, channel = await gate_with(deployment, faults)
    try:
        with pytest.raises(Unavailable, match="DEADLINE_EXCEEDED"):
            await gate.charge(SPACE, 10, "write-2")
    finally:
        await channel.close()
    assert faults.calls == RETRIES


async def test_answers_are_not_retried(deployment: Deployment) -> None:
    faults = Faults(lambda n: None)
    gate, channel = await gate_with(deployment, faults)
    try:
        with pytest.raises(QuotaExceeded):
            await gate.charge(SPACE, 5000, "too-big")
        assert faults.calls == 1, "a refusal is an answer, not a failure"
    finally:
        await channel.close()
    member = mint("ann", "acme", "member")
    faults = Faults(lambda n: None)
    gate, channel = await gate_with(deployment, faults, token=member)
    try:
        with pytest.raises(EngramError):
            await gate.charge(SPACE, 5, "not-a-service")
        assert faults.calls == 1, "PERMISSION_DENIED is not retried"
    finally:
        await channel.close()


async def test_the_remote_gate_carries_attribution_and_the_effective_quota(
    deployment: Deployment,
) -> None:
    """Storage charging a remote QuotaService: a global change reaches the writer's
    attribution counter, and a tenant's usage limit is its effective quota (its org's
    ceiling when lower)."""
    gate, channel = await gate_with(deployment, Faults(lambda n: None))
    platform = deployment.client("quota", mint("root", "acme", "admin", platform_admin=True))
    try:
        handbook = SpaceRef.create(Visibility.GLOBAL, tenant="", name="handbook")
        await gate.charge(handbook, 40, "global-1", attributed_tenant="acme")
        await platform.set_tenant_org("acme", "initech")
        await platform.set_org_quota(700, org="initech")
        usage = await gate.usage(SPACE)
        shown = await platform.quota_usage()
    finally:
        await channel.close()
    assert usage.aggregate_quota_bytes == 700
    assert shown.global_attributed_bytes == 40 and shown.tenant_used_bytes == 0
