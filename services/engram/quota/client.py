"""GrpcQuotaGate: the storage service's QuotaGate when QuotaService runs in its own process,
through engram.client.

Charges carry their idempotency key, so a call retried after a lost answer applies once.
"""

from __future__ import annotations

import grpc

from engram.client import EngramClient
from engram.domain.ports import UsageReport
from engram.domain.spaces import SpaceRef

# Attempts of a charge while the service or the link fails (Unavailable): the first and
# RETRIES - 1 repeats, with the client's backoff between them; then the last error is raised.
RETRIES = 3


class GrpcQuotaGate:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 5.0) -> None:
        self._client = EngramClient(
            channel=channel, token=token, timeout=timeout, retries=RETRIES - 1
        )

    async def charge(
        self,
        space: SpaceRef,
        delta_bytes: int,
        idempotency_key: str,
        *,
        attributed_tenant: str = "",
    ) -> None:
        """Raises the QuotaService's domain error (QuotaExceeded, PermissionDenied, ...);
        only Unavailable (the service or the link failed) is retried."""
        await self._client.charge(
            delta_bytes,
            idempotency_key=idempotency_key,
            space=space,
            attributed_tenant=attributed_tenant,
        )

    async def usage(self, space: SpaceRef) -> UsageReport:
        # Storage counts its documents itself: no round trip back to it for the count.
        report = await self._client.quota_usage(
            tenant=space.tenant or "instance", space=space, without_document_count=True
        )
        return UsageReport(
            space_used_bytes=report.space_used_bytes,
            space_quota_bytes=report.space_quota_bytes,
            aggregate_used_bytes=report.tenant_used_bytes,
            # The tenant's effective quota (its own, or its org's ceiling when lower).
            aggregate_quota_bytes=report.tenant_effective_quota_bytes,
        )
