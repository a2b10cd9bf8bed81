"""StoredUsage from StorageService, through engram.client as QuotaService's service
principal (`engram serve quota`): Reconcile's truth and a space's document count come from
storage's RPCs, never from storage's collections."""

from __future__ import annotations

import grpc

from engram.client import EngramClient
from engram.domain.documents import SpaceUsage
from engram.domain.quotas import INSTANCE


class StorageServiceStoredUsage:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 30.0) -> None:
        self._client = EngramClient(channel=channel, token=token, timeout=timeout)

    async def usage_by_space(self, aggregate_owner: str) -> dict[str, int]:
        """Bytes per space of a tenant ("instance" = the global spaces), one aggregate."""
        if aggregate_owner == INSTANCE:
            return await self._client.sum_stored_usage(global_spaces=True)
        return await self._client.sum_stored_usage(tenant=aggregate_owner)

    async def space_usage(self, space_id: str) -> SpaceUsage:
        usage = await self._client.stored_usage(space_id)
        return SpaceUsage(used_bytes=usage.used_bytes, document_count=usage.document_count)
