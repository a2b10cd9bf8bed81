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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from engram.client import AsyncClient, Document, EngramError, NotFound, Space, status_name


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@dataclass
class _LossCheck:
    """What the check reads with and what it has found so far, shared by its workers."""

    reader: AsyncClient
    agents: dict[str, dict[str, Any]]
    readers: dict[str, AsyncClient] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "acknowledged": 0,
            "checked_documents": 0,
            "version_reads": 0,
            "pruned": 0,
        }
    )
    lost: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[dict[str, Any]] = field(default_factory=list)

    async def read(self, sub: str, path: str, version: int = 0) -> Document:
        """The document (or its kept `version`), read with its agent's own token."""
        if sub not in self.readers:
            agent = self.agents[sub]
            space = Space(visibility="private", tenant=agent["tenant"], name=agent["space"])
            self.readers[sub] = self.reader.as_caller(agent["token"], space=space)
        return await self.readers[sub].read_document(path, version=version)

    async def document(self, sub: str, path: str, writes: list[dict[str, Any]]) -> None:
        """Checks one document against the writes the ledger has for it."""
        acked = [w for w in writes if w["acked"]]
        self.counts["acknowledged"] += len(acked)
        if not acked:
            return
        try:
            current = await self.read(sub, path)
        except EngramError as error:
            code = status_name(error)
            self.unreadable.append({"sub": sub, "path": path, "code": code})
            self.lost.extend({**w, "why": f"document unreadable: {code}"} for w in acked)
            return
        self.counts["checked_documents"] += 1
        if writes[0]["kind"] == "append":
            self.appends(current, acked)
            return
        top = self.replaced(current, writes, acked)
        for w in acked:
            if w is top and current.version == top["version"]:
                continue
            await self.kept_version(sub, path, w)

    def appends(self, current: Document, acked: list[dict[str, Any]]) -> None:
        """Every acknowledged append's token is in the current content."""
        for w in acked:
            if w["token"] not in current.content:
                self.lost.append({**w, "why": "append missing from the document"})

    def replaced(
        self, current: Document, writes: list[dict[str, Any]], acked: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The current version against the highest acknowledged replace; returns that one."""
        top = max(acked, key=lambda w: w["version"])
        if current.version == top["version"]:
            if top["token"] not in current.content:
                self.lost.append({**top, "why": "latest acknowledged replace not the content"})
        elif current.version > top["version"]:
            failed = [w["token"] for w in writes if not w["acked"]]
            if not any(t in current.content for t in failed):
                self.lost.append({**top, "why": f"version {current.version} is no write of ours"})
        else:
            self.lost.append({**top, "why": f"version went back to {current.version}"})
        return top

    async def kept_version(self, sub: str, path: str, w: dict[str, Any]) -> None:
        """An acknowledged replace's own version, read as a kept version, holds its token."""
        self.counts["version_reads"] += 1
        try:
            kept = await self.read(sub, path, w["version"])
        except NotFound:
            self.counts["pruned"] += 1
            return
        except EngramError as error:
            self.lost.append({**w, "why": f"kept version unreadable: {status_name(error)}"})
            return
        if w["token"] not in kept.content:
            self.lost.append({**w, "why": f"kept version {w['version']} lacks the write"})


async def check(
    channel: grpc.aio.Channel,
    entries: list[dict[str, Any]],
    agents: dict[str, dict[str, Any]],
    *,
    concurrency: int = 8,
) -> dict[str, Any]:
    """Reads back what the ledger says was acknowledged; returns counts and the losses.
    `channel`: a grpc.aio channel to StorageService, left open."""
    state = _LossCheck(AsyncClient(channel=channel, retries=0, timeout=30), agents)
    by_doc: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        if entry.get("path"):
            by_doc[(entry["sub"], entry["path"])].append(entry)
    queue = list(by_doc.items())

    async def worker() -> None:
        while queue:
            (sub, path), writes = queue.pop()
            await state.document(sub, path, writes)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        **state.counts,
        "attempted": len(entries),
        "unacknowledged": sum(1 for e in entries if not e["acked"]),
        "lost": len(state.lost),
        "lost_writes": state.lost[:50],
        "unreadable_documents": state.unreadable[:20],
    }
