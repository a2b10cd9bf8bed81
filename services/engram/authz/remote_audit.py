"""An AuditSink over AuthzService's RecordAuditEvent, through engram.client as the calling
service's principal: the audit log belongs to AuthzService, so a service on a database of
its own records there, and ListAuditEvents shows its rows."""

from __future__ import annotations

import grpc

from engram.client import EngramClient
from engram.domain.ports import AuditRecord


class AuthzServiceAuditSink:
    def __init__(self, channel: grpc.aio.Channel, token: str, *, timeout: float = 10.0) -> None:
        self._client = EngramClient(channel=channel, token=token, timeout=timeout)

    async def record(self, entry: AuditRecord) -> None:
        await self._client.record_audit_event(
            entry.action,
            subject=entry.subject,
            tenant=entry.tenant,
            space_id=entry.space_id,
            path=entry.path,
            bytes_delta=entry.bytes_delta,
        )
