"""The short demo `engram dev --demo` runs against itself over gRPC, for newcomers."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import grpc
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from engram.v1 import (
    indexer_pb2,
    indexer_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
    space_pb2,
    storage_pb2,
    storage_pb2_grpc,
)

DEMO_SPACE = space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="demo")

MEMORY = """# MEMORY

- The user prefers concise answers with code examples.
- Project codename: engram. Deploys go out on Tuesdays.

## Incidents

- 2026-03-03: the nightly build failed with ERR_4021 until the cache volume was resized.
"""

# Hybrid searches: a question in other words than the notes use, and a bare identifier.
DEMO_SEARCHES = ("when do we ship releases?", "ERR_4021")
# Indexing in `engram dev` takes tens of milliseconds; the demo waits at most this long.
INDEX_WAIT_SECONDS = 20.0


async def run_demo(address: str, console: Console, *, token: str = "") -> None:
    """Writes MEMORY.md and a daily log, lists and reads them back, then searches them."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    today = datetime.now(UTC).date().isoformat()
    daily = f"daily/{today}.md"
    async with grpc.aio.insecure_channel(address) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        written = await stub.WriteDocument(
            storage_pb2.WriteDocumentRequest(space=DEMO_SPACE, path="MEMORY.md", content=MEMORY),
            metadata=metadata,
        )
        console.print(
            f"[green]wrote[/] MEMORY.md v{written.document.version} "
            f"({written.document.size_bytes} B)"
        )
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        for entry in ("Started the engram demo.", "Stored MEMORY.md and this log."):
            appended = await stub.WriteDocument(
                storage_pb2.WriteDocumentRequest(
                    space=DEMO_SPACE,
                    path=daily,
                    content=f"[{stamp}] {entry}\n",
                    mode=storage_pb2.WRITE_MODE_APPEND,
                ),
                metadata=metadata,
            )
        console.print(f"[green]appended[/] 2 entries to {daily} (v{appended.document.version})")
        listing = await stub.ListDocuments(
            storage_pb2.ListDocumentsRequest(space=DEMO_SPACE, recursive=True), metadata=metadata
        )
        console.print("[bold]documents:[/] " + ", ".join(e.path for e in listing.entries))
        for path in ("MEMORY.md", daily):
            read = await stub.ReadDocument(
                storage_pb2.ReadDocumentRequest(space=DEMO_SPACE, path=path), metadata=metadata
            )
            console.print(Panel(read.document.content.rstrip(), title=path, expand=False))
        await _wait_until_indexed(indexer_pb2_grpc.IndexerServiceStub(channel), metadata)
        await _search(search_pb2_grpc.SearchServiceStub(channel), console, metadata)


async def _wait_until_indexed(
    stub: indexer_pb2_grpc.IndexerServiceAsyncStub, metadata: tuple[tuple[str, str], ...]
) -> None:
    deadline = time.monotonic() + INDEX_WAIT_SECONDS
    while time.monotonic() < deadline:
        status = await stub.GetIndexStatus(indexer_pb2.GetIndexStatusRequest(), metadata=metadata)
        if status.backlog == 0:
            return
        await asyncio.sleep(0.05)


async def _search(
    stub: search_pb2_grpc.SearchServiceAsyncStub,
    console: Console,
    metadata: tuple[tuple[str, str], ...],
) -> None:
    for query in DEMO_SEARCHES:
        request = search_pb2.SearchRequest(spaces=[DEMO_SPACE], query=query, limit=3)
        response = await stub.Search(request, metadata=metadata)
        table = Table(title=f"search: {query!r}", title_justify="left")
        for column in ("path", "chunk", "score", "bm25 rank", "vector rank"):
            table.add_column(column)
        for result in response.results:
            table.add_row(
                result.path,
                str(result.chunk_index),
                f"{result.score:.2f}",
                str(result.bm25_rank or "-"),
                str(result.vector_rank or "-"),
            )
        console.print(table)
        if response.results:
            best = response.results[0]
            console.print(Panel(best.content.rstrip(), title=f"best: {best.path}", expand=False))
