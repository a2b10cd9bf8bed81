"""engram's typed Python client: `EngramClient` (asyncio) and `Engram` (blocking).

    from engram.client import Engram, Space

    with Engram("127.0.0.1:50051", token=token, space=Space(name="agent-1")) as memory:
        memory.memory_write("Prefers short answers.", target="memory")
        for hit in memory.memory_search("answer style").results:
            print(hit.score, hit.path, hit.content)

Results are frozen dataclasses; failures raise engram.domain.errors classes; retries and
deadlines are described in `engram.client.aio`. Importing this package loads grpc and the
generated messages, nothing of the server.
"""

from engram.client.aio import EngramClient
from engram.client.errors import explain
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
from engram.client.sync import Engram
from engram.domain.positions import IndexPosition
from engram.runtime.channels import ClientTls

__all__ = [
    "ClientTls",
    "DirectoryEntry",
    "Document",
    "DocumentPage",
    "DocumentWrite",
    "Engram",
    "EngramClient",
    "Heartbeat",
    "IndexPosition",
    "MemoryDocument",
    "PromptSection",
    "SearchHit",
    "SearchResults",
    "SeedResult",
    "Space",
    "SystemPrompt",
    "TreeNode",
    "WriteResult",
    "explain",
]
