"""Builders shared by the composition roots (`engram dev`, `engram serve <service>`)."""

from __future__ import annotations

from engram.domain.quotas import QuotaDefaults
from engram.domain.spaces import Visibility
from engram.runtime.settings import Settings
from engram.storage.service import DocumentLimits


def quota_defaults(settings: Settings) -> QuotaDefaults:
    return QuotaDefaults(
        subcaps={
            Visibility.PRIVATE: settings.quota_private,
            Visibility.BOT: settings.quota_bot,
            Visibility.PROJECT: settings.quota_project,
            Visibility.CROSS_PROJECT: settings.quota_cross_project,
            Visibility.USER: settings.quota_user,
            Visibility.ORG: settings.quota_org,
            Visibility.GLOBAL: settings.quota_global,
        },
        tenant_total=settings.quota_tenant_total,
        instance_total=settings.quota_instance_total,
    )


def document_limits(settings: Settings) -> DocumentLimits:
    return DocumentLimits(
        max_doc_bytes=settings.max_doc_bytes,
        max_import_bytes=settings.max_import_bytes,
        max_import_entries=settings.max_import_entries,
        max_import_inflight_bytes=settings.max_import_inflight_bytes,  # issue 13
    )
