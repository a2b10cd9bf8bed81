"""The acknowledged-write ledger and the loss check.

The generator appends one JSON line per write attempt: `kind` (append | replace), `sub` (the
agent), `path`, `token` (unique to the write, inside its content), `acked`, and for an
acknowledged write the `version` the server answered. After the run every document a write
touched is read back through StorageService with the agent's token:

* append: every acknowledged append's token is in the document's current content;
* replace: the current version is at least the highest acknowledged one; when equal, the
  current content holds that write's token; when higher, a later attempt that failed on the
  client's side (a timeout, say) may have been applied, so the content must hold the token
  of such an attempt; and every acknowledged replace's own version, read as a kept version
  (`ReadDocument{version}`), holds its token (versions beyond the retention are not checked
  and counted as `pruned`).

Anything else is a lost write, listed in the report.

The reads go through engram.client over the caller's channel, one attempt of at most 30 s
each (retries off, as the check always read): a document that cannot be read is reported
unreadable, with the status code its read ended with.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import grpc

from engram.client import AsyncClient, Document, EngramError, NotFound, Space, status_name


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


async def check(
    channel: grpc.aio.Channel,
    entries: list[dict[str, Any]],
    agents: dict[str, dict[str, Any]],
    *,
    concurrency: int = 8,
) -> dict[str, Any]:
    """Reads back what the ledger says was acknowledged; returns counts and the losses.
    `channel`: a grpc.aio channel to StorageService, left open."""
    reader = AsyncClient(channel=channel, retries=0, timeout=30)
    readers: dict[str, AsyncClient] = {}
    by_doc: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        if entry.get("path"):
            by_doc[(entry["sub"], entry["path"])].append(entry)
    lost: list[dict[str, Any]] = []
    counts = {"acknowledged": 0, "checked_documents": 0, "version_reads": 0, "pruned": 0}
    unreadable: list[dict[str, Any]] = []

    async def read(sub: str, path: str, version: int = 0) -> Document:
        """The document (or its kept `version`), read with its agent's own token."""
        if sub not in readers:
            agent = agents[sub]
            space = Space(visibility="private", tenant=agent["tenant"], name=agent["space"])
            readers[sub] = reader.as_caller(agent["token"], space=space)
        return await readers[sub].read_document(path, version=version)

    async def one(sub: str, path: str, writes: list[dict[str, Any]]) -> None:
        acked = [w for w in writes if w["acked"]]
        counts["acknowledged"] += len(acked)
        if not acked:
            return
        try:
            current = await read(sub, path)
        except EngramError as error:
            code = status_name(error)
            unreadable.append({"sub": sub, "path": path, "code": code})
            lost.extend({**w, "why": f"document unreadable: {code}"} for w in acked)
            return
        counts["checked_documents"] += 1
        if writes[0]["kind"] == "append":
            for w in acked:
                if w["token"] not in current.content:
                    lost.append({**w, "why": "append missing from the document"})
            return
        top = max(acked, key=lambda w: w["version"])
        if current.version == top["version"]:
            if top["token"] not in current.content:
                lost.append({**top, "why": "latest acknowledged replace not the content"})
        elif current.version > top["version"]:
            failed = [w["token"] for w in writes if not w["acked"]]
            if not any(t in current.content for t in failed):
                lost.append({**top, "why": f"version {current.version} is no write of ours"})
        else:
            lost.append({**top, "why": f"version went back to {current.version}"})
        for w in acked:
            if w is top and current.version == top["version"]:
                continue
            counts["version_reads"] += 1
            try:
                kept = await read(sub, path, w["version"])
            except NotFound:
                counts["pruned"] += 1
                continue
            except EngramError as error:
                lost.append({**w, "why": f"kept version unreadable: {status_name(error)}"})
                continue
            if w["token"] not in kept.content:
                lost.append({**w, "why": f"kept version {w['version']} lacks the write"})

    queue = list(by_doc.items())

    async def worker() -> None:
        while queue:
            (sub, path), writes = queue.pop()
            await one(sub, path, writes)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        **counts,
        "attempted": len(entries),
        "unacknowledged": sum(1 for e in entries if not e["acked"]),
        "lost": len(lost),
        "lost_writes": lost[:50],
        "unreadable_documents": unreadable[:20],
    }
