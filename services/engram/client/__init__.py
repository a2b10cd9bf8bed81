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
are described in `engram.client.aio`. Importing this package loads grpc and the generated
messages, nothing of the server.
"""

from engram.client.aio import EngramClient
from engram.client.authz import (
    AuditEvent,
    Authorization,
    CreatedToken,
    Principal,
    TokenInfo,
)
from engram.client.base import (
    Page,
)
from engram.client.errors import explain, status_name
from engram.client.indexer import (
    IndexStatus,
)
from engram.client.maintenance import (
    JobRun,
    SpaceMaintenance,
)
from engram.client.models import (
    DirectoryEntry,
    Document,
    DocumentPage,
    DocumentWrite,
    Heartbeat,
    MemoryDocument,
    PromptSection,
    SearchHit,
    SearchResults,
    SeedResult,
    Space,
    SystemPrompt,
    TreeNode,
    WriteResult,
)
from engram.client.quota import (
    Charge,
    QuotaUsage,
    Reconciliation,
    TenantOrg,
    UsageDrift,
)
from engram.client.storage import (
    Deletion,
    DocumentVersion,
    ImportedEntry,
    ImportResult,
    Purge,
    SpaceChange,
    SpaceDeletion,
    SpaceSummary,
    Usage,
    WatchEvent,
)
from engram.client.sync import Engram
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

# The names the issue and the README use; EngramClient and Engram stay for older callers.
AsyncClient = EngramClient
Client = Engram

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
