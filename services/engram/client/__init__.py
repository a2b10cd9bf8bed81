"""engram's typed Python client for every RPC of its seven services: `AsyncClient`
(asyncio; also named `EngramClient`) and `Client` (blocking; also named `Engram`), with the
same methods.

    from engram.client import Client, Conflict, Space

    with Client("127.0.0.1:50051", token="egm_...", space=Space(name="agent-1")) as memory:
        memory.memory_write("Prefers short answers.", target="memory")
        for hit in memory.memory_search("answer style").results:
            print(hit.score, hit.path, hit.content)

Results are frozen dataclasses; failures raise engram's domain errors, re-exported here
(`from engram.client import ProtectedFile, RateLimited, Conflict`); retries and deadlines
are described in `engram.client.aio`. Importing this package loads nothing: each name is
imported on first use (PEP 562), and each family of results when a call first returns one
(engram.client.results), so a command pays only for what it calls. Nothing of the server is
ever loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram.client.aio import EngramClient
    from engram.client.aio import EngramClient as AsyncClient
    from engram.client.errors import explain, status_name
    from engram.client.models import Space
    from engram.client.results.authz import (
        AuditEvent,
        Authorization,
        CreatedToken,
        Principal,
        TokenInfo,
    )
    from engram.client.results.documents import Document, DocumentWrite
    from engram.client.results.erasure import Purge, SpaceDeletion
    from engram.client.results.feed import SpaceChange, WatchEvent
    from engram.client.results.indexer import IndexStatus
    from engram.client.results.listing import DirectoryEntry, DocumentPage
    from engram.client.results.maintenance import JobRun, SpaceMaintenance
    from engram.client.results.page import Page
    from engram.client.results.quota import (
        Charge,
        QuotaUsage,
        Reconciliation,
        TenantOrg,
        UsageDrift,
    )
    from engram.client.results.search import SearchHit, SearchResults
    from engram.client.results.spaces import SpaceSummary
    from engram.client.results.transfer import ImportedEntry, ImportResult
    from engram.client.results.usage import Usage
    from engram.client.results.versions import DocumentVersion
    from engram.client.results.workspace import (
        Heartbeat,
        MemoryDocument,
        PromptSection,
        SeedResult,
        SystemPrompt,
        TreeNode,
        WriteResult,
    )
    from engram.client.storage import Deletion
    from engram.client.sync import Engram
    from engram.client.sync import Engram as Client
    from engram.domain.errors import (
        Conflict,
        ContentTooLarge,
        DocumentNotFound,
        EngramError,
        EtagMismatch,
        InvalidArchive,
        InvalidArgument,
        InvalidContent,
        InvalidPageToken,
        InvalidPath,
        InvalidSpaceRef,
        Misconfigured,
        MissingSetting,
        NotFound,
        PermissionDenied,
        ProtectedFile,
        QuotaExceeded,
        RateLimited,
        SecretInContent,
        Unauthenticated,
        Unavailable,
        UndecodableRequest,
        VersionNotFound,
        WriteContention,
    )
    from engram.domain.positions import IndexPosition
    from engram.runtime.channels import ClientTls

# Where each name lives, as (module, name there). `AsyncClient` and `Client` are the names
# the issue and the README use; EngramClient and Engram stay for older callers.
_ERRORS = "engram.domain.errors"
_HOMES: dict[str, tuple[str, str]] = {
    "AsyncClient": ("engram.client.aio", "EngramClient"),
    "EngramClient": ("engram.client.aio", "EngramClient"),
    "Client": ("engram.client.sync", "Engram"),
    "Engram": ("engram.client.sync", "Engram"),
    "Space": ("engram.client.models", "Space"),
    "Deletion": ("engram.client.storage", "Deletion"),
    "explain": ("engram.client.errors", "explain"),
    "status_name": ("engram.client.errors", "status_name"),
    "IndexPosition": ("engram.domain.positions", "IndexPosition"),
    "ClientTls": ("engram.runtime.channels", "ClientTls"),
    **{
        name: (f"engram.client.results.{family}", name)
        for family, names in {
            "authz": ("AuditEvent", "Authorization", "CreatedToken", "Principal", "TokenInfo"),
            "documents": ("Document", "DocumentWrite"),
            "erasure": ("Purge", "SpaceDeletion"),
            "feed": ("SpaceChange", "WatchEvent"),
            "indexer": ("IndexStatus",),
            "listing": ("DirectoryEntry", "DocumentPage"),
            "maintenance": ("JobRun", "SpaceMaintenance"),
            "page": ("Page",),
            "quota": ("Charge", "QuotaUsage", "Reconciliation", "TenantOrg", "UsageDrift"),
            "search": ("SearchHit", "SearchResults"),
            "spaces": ("SpaceSummary",),
            "transfer": ("ImportedEntry", "ImportResult"),
            "usage": ("Usage",),
            "versions": ("DocumentVersion",),
            "workspace": (
                "Heartbeat",
                "MemoryDocument",
                "PromptSection",
                "SeedResult",
                "SystemPrompt",
                "TreeNode",
                "WriteResult",
            ),
        }.items()
        for name in names
    },
    **{
        name: (_ERRORS, name)
        for name in (
            "Conflict",
            "ContentTooLarge",
            "DocumentNotFound",
            "EngramError",
            "EtagMismatch",
            "InvalidArchive",
            "InvalidArgument",
            "InvalidContent",
            "InvalidPageToken",
            "InvalidPath",
            "InvalidSpaceRef",
            "Misconfigured",
            "MissingSetting",
            "NotFound",
            "PermissionDenied",
            "ProtectedFile",
            "QuotaExceeded",
            "RateLimited",
            "SecretInContent",
            "Unauthenticated",
            "Unavailable",
            "UndecodableRequest",
            "VersionNotFound",
            "WriteContention",
        )
    },
}


# Hidden from type checkers, which see the imports above: a module `__getattr__` would make
# every misspelt name of this package pass as Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """`engram.client.<name>`, imported on first use and kept (a module's import runs
        under Python's import lock, so threads asking at once get the one object)."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module, attribute = home
        found = getattr(importlib.import_module(module), attribute)
        globals()[name] = found
        return found

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


__all__ = [
    "AsyncClient",
    "AuditEvent",
    "Authorization",
    "Charge",
    "Client",
    "ClientTls",
    "Conflict",
    "ContentTooLarge",
    "CreatedToken",
    "DirectoryEntry",
    "Deletion",
    "Document",
    "DocumentNotFound",
    "DocumentPage",
    "DocumentVersion",
    "DocumentWrite",
    "Engram",
    "EngramClient",
    "EngramError",
    "EtagMismatch",
    "Heartbeat",
    "ImportResult",
    "ImportedEntry",
    "IndexPosition",
    "IndexStatus",
    "InvalidArchive",
    "InvalidArgument",
    "InvalidContent",
    "InvalidPageToken",
    "InvalidPath",
    "InvalidSpaceRef",
    "JobRun",
    "MemoryDocument",
    "Misconfigured",
    "MissingSetting",
    "NotFound",
    "Page",
    "PermissionDenied",
    "Principal",
    "PromptSection",
    "ProtectedFile",
    "Purge",
    "QuotaExceeded",
    "QuotaUsage",
    "RateLimited",
    "Reconciliation",
    "SearchHit",
    "SearchResults",
    "SecretInContent",
    "SeedResult",
    "Space",
    "SpaceChange",
    "SpaceDeletion",
    "SpaceMaintenance",
    "SpaceSummary",
    "SystemPrompt",
    "TenantOrg",
    "TokenInfo",
    "TreeNode",
    "Unauthenticated",
    "Unavailable",
    "UndecodableRequest",
    "Usage",
    "UsageDrift",
    "VersionNotFound",
    "WatchEvent",
    "WriteContention",
    "WriteResult",
    "explain",
    "status_name",
]
