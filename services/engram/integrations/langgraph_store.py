"""LangGraph's long-term memory store (`BaseStore`) backed by an engram space.

An item `(namespace, key) -> value` is the document `<label>/.../<key>.md` of the space
(each label and the key percent-encoded), holding the JSON value in a fenced block, so items
are versioned, quota-checked, indexed and searchable like any other memory:

    from langgraph.graph import StateGraph
    from engram.client import EngramClient, Space
    from engram.integrations.langgraph_store import EngramStore

    async with EngramClient(addr, token=token, space=Space(name="agent-1")) as engram:
        graph = builder.compile(store=EngramStore(engram))
        await graph.ainvoke(...)

`search` with a `query` runs engram's hybrid search (BM25 and vectors fused) under the
namespace prefix and scores items by their best passage; without one it lists the namespace.
`filter` matches top-level fields (a value, or `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`).
A search waits (at most `read_wait_ms`) for this store's own writes to be indexed, so a put
is found by the next search. engram.client is asyncio: use the graph's async API (`ainvoke`,
`astream`); the blocking `batch` is refused with a message saying so.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from engram.client import Document, EngramClient, IndexPosition, Space
from engram.domain.errors import DocumentNotFound

FENCE_OPEN = "```json\n"
FENCE_CLOSE = "\n```\n"
LIST_PAGE = 1000
# Search hits asked for per item wanted: several passages may come from one item.
HITS_PER_ITEM = 3
MAX_SEARCH_HITS = 100
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def item_path(namespace: tuple[str, ...], key: str) -> str:
    return "/".join(quote(part, safe="") for part in (*namespace, key)) + ".md"


def namespace_dir(namespace: tuple[str, ...]) -> str:
    return "/".join(quote(part, safe="") for part in namespace)


def split_path(path: str) -> tuple[tuple[str, ...], str]:
    *labels, name = path.removesuffix(".md").split("/")
    return tuple(unquote(label) for label in labels), unquote(name)


def render(value: dict[str, Any]) -> str:
    return (
        FENCE_OPEN + json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True) + FENCE_CLOSE
    )


def parse(content: str) -> dict[str, Any] | None:
    if not (content.startswith(FENCE_OPEN) and content.endswith(FENCE_CLOSE)):
        return None  # not an item of this store (another document of the space)
    value = json.loads(content[len(FENCE_OPEN) : -len(FENCE_CLOSE)])
    return value if isinstance(value, dict) else None


def matches(value: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    for field, condition in (wanted or {}).items():
        present = value.get(field)
        if isinstance(condition, dict) and condition and all(k in OPERATORS for k in condition):
            try:
                if not all(OPERATORS[k](present, v) for k, v in condition.items()):
                    return False
            except TypeError:
                return False
        elif present != condition:
            return False
    return True


def _matches_namespace(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    pattern = condition.path
    if len(namespace) < len(pattern):
        return False
    pairs = (
        zip(namespace, pattern, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(pattern), strict=False)
    )
    return all(want in ("*", have) for have, want in pairs)


class EngramStore(BaseStore):
    """LangGraph `BaseStore` over one engram space (the client's, or `space`)."""

    def __init__(
        self, client: EngramClient, *, space: Space | None = None, read_wait_ms: int = 5000
    ) -> None:
        self._client = client
        self._space = space or client.space
        self._read_wait_ms = read_wait_ms
        self._written: dict[str, IndexPosition] = {}

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise NotImplementedError(
            "EngramStore is asynchronous (engram.client is asyncio): use the graph's async API "
            "(ainvoke, astream) or the store's a* methods"
        )

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(op))
            else:
                raise TypeError(f"unknown store operation {type(op).__name__}")
        return results

    # --- operations ---------------------------------------------------------------------------

    async def _document(self, path: str) -> Document | None:
        try:
            return await self._client.read_document(path, space=self._space)
        except DocumentNotFound:
            return None

    def _item(self, document: Document) -> Item | None:
        value = parse(document.content)
        if value is None:
            return None
        namespace, key = split_path(document.path)
        created = document.created_at or datetime.now(UTC)
        return Item(
            value=value,
            key=key,
            namespace=namespace,
            created_at=created,
            updated_at=document.updated_at or created,
        )

    async def _get(self, op: GetOp) -> Item | None:
        document = await self._document(item_path(op.namespace, op.key))
        return self._item(document) if document is not None else None

    async def _put(self, op: PutOp) -> None:
        path = item_path(op.namespace, op.key)
        if op.value is None:
            try:
                await self._client.delete_document(path, space=self._space)
            except DocumentNotFound:
                pass
            self._written.pop(path, None)
            return
        written = await self._client.write_document(path, render(dict(op.value)), space=self._space)
        if written.position is not None:
            self._written[path] = written.position

    async def _paths(self, directory: str) -> list[str]:
        paths: list[str] = []
        token = ""
        while True:
            page = await self._client.list_documents(
                directory, recursive=True, page_size=LIST_PAGE, page_token=token, space=self._space
            )
            paths += [e.path for e in page.entries if not e.is_dir and e.path.endswith(".md")]
            token = page.next_page_token
            if not token:
                return paths

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = namespace_dir(op.namespace_prefix)
        scored: dict[str, float | None] = {}
        if op.query:
            found = await self._client.search(
                op.query,
                limit=min(MAX_SEARCH_HITS, (op.limit + op.offset) * HITS_PER_ITEM),
                path_prefix=prefix + "/" if prefix else "",
                min_positions=list(self._written.values()),
                max_wait_ms=self._read_wait_ms if self._written else 0,
            )
            if max(found.keyword_positions_behind, found.vector_positions_behind) == 0:
                self._written.clear()
            for hit in found.results:
                scored.setdefault(hit.path, hit.score)
        else:
            scored = dict.fromkeys(await self._paths(prefix))
        items: list[SearchItem] = []
        for path, score in scored.items():
            document = await self._document(path)
            item = self._item(document) if document is not None else None
            if item is None or not matches(item.value, op.filter):
                continue
            items.append(
                SearchItem(
                    item.namespace,
                    item.key,
                    item.value,
                    item.created_at,
                    item.updated_at,
                    score=score,
                )
            )
        return items[op.offset : op.offset + op.limit]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: dict[tuple[str, ...], None] = {}
        for path in await self._paths(""):
            namespace, _ = split_path(path)
            if op.max_depth is not None:
                namespace = namespace[: op.max_depth]
            if namespace and all(
                _matches_namespace(c, namespace) for c in op.match_conditions or ()
            ):
                found[namespace] = None
        return sorted(found)[op.offset : op.offset + op.limit]
