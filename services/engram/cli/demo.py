"""The short demo `engram dev --demo` runs against itself over gRPC, for newcomers."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
from rich.console import Console
from rich.panel import Panel

from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc

DEMO_SPACE = space_pb2.SpaceRef(visibility=space_pb2.VISIBILITY_PRIVATE, name="demo")

MEMORY = """# MEMORY

- The user prefers concise answers with code examples.
- Project codename: engram. Deploys go out on Tuesdays.
"""


async def run_demo(address: str, console: Console, *, token: str = "") -> None:
    """Writes MEMORY.md and a daily log, then lists and reads them back."""
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
