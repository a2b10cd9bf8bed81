"""GrpcQuotaGate: the storage service's QuotaGate when QuotaService runs in its own process.

Charges carry their idempotency key, so a call retried after a lost answer applies once.
"""

from __future__ import annotations

import grpc
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from engram.domain.errors import Unavailable
from engram.domain.ports import UsageReport
from engram.domain.spaces import SpaceRef
from engram.runtime.errors import remote_errors
from engram.v1 import quota_pb2, quota_pb2_grpc
from engram.wire import space_to_proto

RETRIES = 3

# A charge is retried (with its idempotency key) only while the service or the link fails
# (Unavailable): 3 attempts, 0.1 s then 0.2 s apart; then the last error is raised.
_CHARGE_RETRYING = AsyncRetrying(
    stop=stop_after_attempt(RETRIES),
    wait=wait_exponential(multiplier=0.1),
    retry=retry_if_exception_type(Unavailable),
    reraise=True,
)


class GrpcQuotaGate:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 5.0) -> None:
        self._stub = quota_pb2_grpc.QuotaServiceStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout

    async def charge(self, space: SpaceRef, delta_bytes: int, idempotency_key: str) -> None:
        """Raises the QuotaService's domain error (QuotaExceeded, PermissionDenied, ...);
        only Unavailable (the service or the link failed) is retried."""
        request = quota_pb2.ChargeRequest(
            space=space_to_proto(space), delta_bytes=delta_bytes, idempotency_key=idempotency_key
        )
        async for attempt in _CHARGE_RETRYING.copy():
            with attempt, remote_errors("QuotaService.Charge"):
                await self._stub.Charge(request, metadata=self._metadata, timeout=self._timeout)

    async def usage(self, space: SpaceRef) -> UsageReport:
        with remote_errors("QuotaService.GetUsage"):
            response = await self._stub.GetUsage(
                quota_pb2.QuotaServiceGetUsageRequest(
                    tenant=space.tenant or "instance", space=space_to_proto(space)
                ),
                metadata=self._metadata,
                timeout=self._timeout,
            )
        return UsageReport(
            space_used_bytes=response.space_used_bytes,
            space_quota_bytes=response.space_quota_bytes,
            aggregate_used_bytes=response.tenant_used_bytes,
            aggregate_quota_bytes=response.tenant_quota_bytes,
        )
