"""GrpcQuotaGate: the storage service's QuotaGate when QuotaService runs in its own process.

Charges carry their idempotency key, so a call retried after a lost answer applies once.
"""

from __future__ import annotations

import asyncio

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.domain.errors import QuotaExceeded, Unavailable
from engram.domain.spaces import SpaceRef
from engram.storage.ports import UsageReport
from engram.v1 import quota_pb2, quota_pb2_grpc
from engram.wire import space_to_proto

RETRIES = 3


def _quota_error(error: grpc.aio.AioRpcError) -> QuotaExceeded | None:
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.reason == QuotaExceeded.reason:
            meta = info.metadata
            return QuotaExceeded(
                error.details() or "quota exceeded",
                limit=meta.get("limit", ""),
                subject=meta.get("limit", ""),
                limit_bytes=int(meta.get("limit_bytes", "0")),
                used_bytes=int(meta.get("used_bytes", "0")),
                requested_bytes=int(meta.get("requested_bytes", "0")),
            )
    return None


class GrpcQuotaGate:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 5.0) -> None:
        self._stub = quota_pb2_grpc.QuotaServiceStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout

    async def charge(self, space: SpaceRef, delta_bytes: int, idempotency_key: str) -> None:
        request = quota_pb2.ChargeRequest(
            space=space_to_proto(space), delta_bytes=delta_bytes, idempotency_key=idempotency_key
        )
        for attempt in range(RETRIES):
            try:
                await self._stub.Charge(request, metadata=self._metadata, timeout=self._timeout)
                return
            except grpc.aio.AioRpcError as error:
                exceeded = _quota_error(error)
                if exceeded is not None:
                    raise exceeded from None
                retriable = error.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retriable or attempt == RETRIES - 1:
                    raise Unavailable(
                        f"QuotaService failed: {error.code().name}: {error.details()}"
                    ) from None
                await asyncio.sleep(0.1 * 2**attempt)

    async def usage(self, space: SpaceRef) -> UsageReport:
        try:
            response = await self._stub.GetUsage(
                quota_pb2.QuotaServiceGetUsageRequest(
                    tenant=space.tenant or "instance", space=space_to_proto(space)
                ),
                metadata=self._metadata,
                timeout=self._timeout,
            )
        except grpc.aio.AioRpcError as error:
            raise Unavailable(
                f"QuotaService failed: {error.code().name}: {error.details()}"
            ) from None
        return UsageReport(
            space_used_bytes=response.space_used_bytes,
            space_quota_bytes=response.space_quota_bytes,
            aggregate_used_bytes=response.tenant_used_bytes,
            aggregate_quota_bytes=response.tenant_quota_bytes,
        )
