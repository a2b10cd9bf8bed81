"""OpenSearchKeywordIndex: the production BM25 chunk index (ARCHITECTURE §4).

One concrete index (`<alias>-000001`) behind the alias (default `engram-chunks`), created
from an index template at `open()`, idempotently. `_id` is the chunk id, and every write and
search is routed by space (`routing_key`), so one space's chunks share a shard and a search
of k spaces touches at most k shards.

Mapping: `chunk_id`, `space_id`, `tenant`, `path`, `document_id` and `path_dirs` (every
scope of the path, see `scoping`) are keywords; `chunk_index`, `doc_version` integers;
`content` is text with the `english` analyzer (standard tokenizer, stop words, Porter
stemming), plus the sub-field `content.exact` whose analyzer keeps identifiers whole
(`scoping.IDENTIFIER_PATTERN`): `english` splits `deploy-2026-03-03` into `deploi`, `2026`,
`03`, `03`, so without it the identifier only matches as a bag of common tokens. A search is
one `bool` query: `filter` terms on `space_id` (and `path_dirs`), and `must` a `most_fields`
match over `content` and `content.exact`. Match queries analyze text and never parse query
syntax, so no user input can make them fail.

A replace is one search (the path's stale chunks: those not among the new ids) and one bulk
request (several for a document over ~512 KiB of JSON) that indexes the new chunks and
deletes the stale ones; its last request carries `refresh`, so the new state is visible
when the call returns. Chunk writes use external versions
(`doc_version`, `external_gte`) and stale deletes use `if_seq_no`, so a slower replace of an
older version of the same document can neither overwrite nor delete newer chunks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import (
    ConnectionError as OpenSearchConnectionError,
)
from opensearchpy.exceptions import (
    ConnectionTimeout,
    OpenSearchException,
    TransportError,
)

from engram.domain.chunks import Chunk, IndexedDocument, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import (
    IDENTIFIER_PATTERN,
    PATH_SCOPES_FIELD,
    bound_query,
    normalize_path_prefix,
    path_scopes,
)
from engram.indexes.ports import IndexUnavailable

DEFAULT_ALIAS = "engram-chunks"
WriteRefresh = Literal["true", "wait_for"]

_SOURCE_FIELDS = [
    "chunk_id",
    "document_id",
    "space_id",
    "tenant",
    "path",
    "chunk_index",
    "doc_version",
    "content",
]
# What the embedding backfill reads of each chunk (indexed_documents).
_IDENTITY_FIELDS = ["path", "document_id", "doc_version"]
# Bulk request bodies stay under this size: bounded JSON encoding on the event loop per
# request, and below aiohttp's 1 MiB "large body" threshold.
_BULK_BYTES = 512 * 1024
# Larger replaces are JSON-encoded on a worker thread, not on the event loop.
_ENCODE_INLINE_CHUNKS = 64
# Page size when listing a path's chunks (a 2 MiB document has about 4,700).
_PAGE = 2000


def routing_key(space_id: str) -> str:
    """The routing value of a space: its id, unless the id holds a comma (search routing is
    a comma-separated list), in which case a digest of it."""
    if "," not in space_id:
        return space_id
    return "sha256:" + hashlib.sha256(space_id.encode()).hexdigest()


def index_body(*, shards: int, replicas: int, refresh_interval: str) -> dict[str, Any]:
    """Settings and mappings of the chunk index (the template's `template` part)."""
    keyword = {"type": "keyword"}
    return {
        "settings": {
            "index": {
                "number_of_shards": shards,
                "number_of_replicas": replicas,
                "refresh_interval": refresh_interval,
            },
            "analysis": {
                "tokenizer": {
                    "engram_ident": {
                        "type": "pattern",
                        "pattern": "(?U)" + IDENTIFIER_PATTERN,
                        "group": 0,
                    }
                },
                "analyzer": {
                    "engram_ident": {
                        "type": "custom",
                        "tokenizer": "engram_ident",
                        "filter": ["lowercase"],
                    }
                },
            },
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "chunk_id": keyword,
                "space_id": keyword,
                "tenant": keyword,
                "path": keyword,
                "document_id": keyword,
                PATH_SCOPES_FIELD: keyword,
                "chunk_index": {"type": "integer"},
                "doc_version": {"type": "integer"},
                "content": {
                    "type": "text",
                    "analyzer": "english",
                    "fields": {
                        "exact": {
                            "type": "text",
                            "analyzer": "engram_ident",
                            "index_options": "freqs",
                        }
                    },
                },
            },
        },
    }


class OpenSearchKeywordIndex:
    """A `KeywordIndex` on an OpenSearch cluster."""

    def __init__(
        self,
        url: str,
        *,
        alias: str = DEFAULT_ALIAS,
        shards: int = 1,
        replicas: int = 1,
        refresh_interval: str = "1s",
        write_refresh: WriteRefresh = "true",
        timeout_seconds: float = 10.0,
    ) -> None:
        self._url = url
        self._alias = alias
        self._shards = shards
        self._replicas = replicas
        self._refresh_interval = refresh_interval
        self._write_refresh = write_refresh
        self._timeout = timeout_seconds
        self._client: Any = None

    @property
    def alias(self) -> str:
        return self._alias

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Puts the index template and creates the first index with the alias if missing."""
        if self._client is not None:
            return
        client = AsyncOpenSearch(
            hosts=[self._url], timeout=self._timeout, max_retries=1, retry_on_timeout=False
        )
        try:
            await self._ensure_index(client)
        except BaseException:
            await client.close()
            raise
        self._client = client

    async def ping(self) -> bool:
        """True when the cluster answers (the health probe; never on the request path)."""
        if self._client is None:
            return False
        async with _mapped("ping"):
            return bool(await self._client.ping())

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def _ensure_index(self, client: Any) -> None:
        alias = self._alias
        template = {
            "index_patterns": [f"{alias}-*"],
            "priority": 100,
            "template": index_body(
                shards=self._shards,
                replicas=self._replicas,
                refresh_interval=self._refresh_interval,
            ),
        }
        async with _mapped("open"):
            await client.indices.put_index_template(name=f"{alias}-template", body=template)
            if await client.indices.exists_alias(name=alias):
                return
            if await client.indices.exists(index=alias):
                raise IndexUnavailable(
                    f"OpenSearch has an index named {alias!r} where engram expects an alias "
                    "(was a document written before engram created it?); delete that index",
                    metadata={"backend": "opensearch"},
                )
            try:
                await client.indices.create(
                    index=f"{alias}-000001",
                    body={"aliases": {alias: {"is_write_index": True}}},
                )
            except TransportError as exc:
                # Another replica's open() won the race; its index carries the alias.
                if _error_type(exc) != "resource_already_exists_exception":
                    raise

    # --- writes ------------------------------------------------------------------------------

    async def replace_chunks(self, space_id: str, path: str, chunks: Sequence[Chunk]) -> None:
        """Makes (space_id, path) hold exactly `chunks`, visible to search on return."""
        for chunk in chunks:
            if chunk.space_id != space_id or chunk.path != path:
                raise InvalidArgument(
                    f"chunk {chunk.chunk_id} belongs to {chunk.space_id}:{chunk.path}, not "
                    f"{space_id}:{path}",
                    field="chunks",
                )
        client = self._open_client()
        routing = routing_key(space_id)
        if len(chunks) > _ENCODE_INLINE_CHUNKS:
            lines = await asyncio.to_thread(_index_lines, self._alias, routing, chunks)
        else:
            lines = _index_lines(self._alias, routing, chunks)
        newer = (chunks[0].document_id, chunks[0].doc_version) if chunks else None
        for stale_id, seq_no, primary_term in await self._stale(
            client, space_id, path, [c.chunk_id for c in chunks], newer
        ):
            action = {
                "delete": {
                    "_index": self._alias,
                    "_id": stale_id,
                    "routing": routing,
                    "if_seq_no": seq_no,
                    "if_primary_term": primary_term,
                }
            }
            lines.append(_ndjson(action))
        batches = _batches(lines)
        for number, batch in enumerate(batches, start=1):
            # Only the last request refreshes: it makes the whole replace visible at once
            # (a large document's earlier batches may show up earlier at a periodic refresh).
            refresh = self._write_refresh if number == len(batches) else "false"
            async with _mapped("bulk write"):
                response = await client.bulk(body=batch, refresh=refresh)
            if response.get("errors"):
                _raise_item_errors(response)

    async def delete_chunks(self, space_id: str, path: str) -> None:
        await self.replace_chunks(space_id, path, ())

    async def delete_space(self, space_id: str) -> None:
        """Deletes the space's chunks by query (routed to its shard), refreshing so they
        are gone from search on return; a chunk written meanwhile is deleted too
        (conflicts proceed), which the indexer's re-read after the erasure restores."""
        client = self._open_client()
        async with _mapped("delete space"):
            await client.delete_by_query(
                index=self._alias,
                body={"query": {"term": {"space_id": space_id}}},
                routing=routing_key(space_id),
                conflicts="proceed",
                refresh=True,
            )

    async def _stale(
        self,
        client: Any,
        space_id: str,
        path: str,
        keep_ids: list[str],
        newer_than: tuple[str, int] | None,
    ) -> list[tuple[str, int, int]]:
        """(id, seq_no, primary_term) of the path's chunks not in `keep_ids`, leaving out
        chunks of the same document with a newer version than `newer_than`'s."""
        must_not: list[dict[str, Any]] = []
        if keep_ids:
            must_not.append({"ids": {"values": keep_ids}})
        if newer_than is not None:
            document_id, version = newer_than
            must_not.append(
                {
                    "bool": {
                        "filter": [
                            {"term": {"document_id": document_id}},
                            {"range": {"doc_version": {"gt": version}}},
                        ]
                    }
                }
            )
        query = {
            "bool": {
                "filter": [{"term": {"space_id": space_id}}, {"term": {"path": path}}],
                "must_not": must_not,
            }
        }
        found: list[tuple[str, int, int]] = []
        async for hit in self._scan(client, space_id, query, source=False):
            found.append((hit["_id"], hit["_seq_no"], hit["_primary_term"]))
        return found

    # --- reads -------------------------------------------------------------------------------

    async def search(
        self, space_ids: Sequence[str], query: str, *, limit: int, path_prefix: str = ""
    ) -> list[ScoredChunk]:
        """BM25 hits, best first, filtered inside OpenSearch to `space_ids` and the directory
        scope `path_prefix`."""
        if limit <= 0 or not space_ids:
            return []
        client = self._open_client()
        spaces = sorted(set(space_ids))
        filters: list[dict[str, Any]] = [{"terms": {"space_id": spaces}}]
        scope = normalize_path_prefix(path_prefix)
        if scope:
            filters.append({"term": {PATH_SCOPES_FIELD: scope}})
        body = {
            "size": limit,
            "track_total_hits": False,
            "_source": _SOURCE_FIELDS,
            "query": {
                "bool": {
                    "filter": filters,
                    "must": [
                        {
                            "multi_match": {
                                "query": bound_query(query),
                                "fields": ["content", "content.exact"],
                                "type": "most_fields",
                            }
                        }
                    ],
                }
            },
        }
        routing = ",".join(sorted({routing_key(s) for s in spaces}))
        async with _mapped("search"):
            response = await client.search(index=self._alias, body=body, routing=routing)
        return [
            ScoredChunk(chunk=_chunk(hit["_source"]), score=float(hit["_score"]))
            for hit in response["hits"]["hits"]
        ]

    async def chunks_of(self, space_id: str, path: str) -> list[Chunk]:
        client = self._open_client()
        query = {"bool": {"filter": [{"term": {"space_id": space_id}}, {"term": {"path": path}}]}}
        chunks = [
            _chunk(hit["_source"]) async for hit in self._scan(client, space_id, query, source=True)
        ]
        return sorted(chunks, key=lambda c: c.chunk_index)

    async def indexed_documents(self, space_id: str) -> dict[str, IndexedDocument]:
        client = self._open_client()
        query = {"bool": {"filter": [{"term": {"space_id": space_id}}]}}
        entries: list[tuple[str, str, int]] = []
        async for hit in self._scan(client, space_id, query, source=_IDENTITY_FIELDS):
            fields = hit["_source"]
            entries.append((fields["path"], fields["document_id"], int(fields["doc_version"])))
        return indexed_documents(entries)

    async def _scan(
        self,
        client: Any,
        space_id: str,
        query: dict[str, Any],
        *,
        source: bool | list[str],
    ) -> AsyncIterator[dict[str, Any]]:
        """Every hit of a query within one space, in pages sorted by chunk id; `source`
        True = the chunk fields, a list = those fields, False = none (with seq_no)."""
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": _PAGE,
                "query": query,
                "sort": [{"chunk_id": "asc"}],
                "track_total_hits": False,
                "_source": _SOURCE_FIELDS if source is True else source,
            }
            if after is not None:
                body["search_after"] = after
            async with _mapped("search"):
                response = await client.search(
                    index=self._alias,
                    body=body,
                    routing=routing_key(space_id),
                    seq_no_primary_term=source is False,
                )
            hits = response["hits"]["hits"]
            for hit in hits:
                yield hit
            if len(hits) < _PAGE:
                return
            after = hits[-1]["sort"]

    def _open_client(self) -> Any:
        if self._client is None:
            raise IndexUnavailable(
                "the OpenSearch keyword index is not open", metadata={"backend": "opensearch"}
            )
        return self._client


def _index_lines(alias: str, routing: str, chunks: Sequence[Chunk]) -> list[str]:
    """Bulk `index` lines for `chunks`, versioned by their document version."""
    lines = []
    for chunk in chunks:
        action = {
            "index": {
                "_index": alias,
                "_id": chunk.chunk_id,
                "routing": routing,
                "version": chunk.doc_version,
                "version_type": "external_gte",
            }
        }
        lines.append(_ndjson(action, _source(chunk)))
    return lines


def _ndjson(action: dict[str, Any], source: dict[str, Any] | None = None) -> str:
    line = json.dumps(action, ensure_ascii=False, separators=(",", ":")) + "\n"
    if source is not None:
        line += json.dumps(source, ensure_ascii=False, separators=(",", ":")) + "\n"
    return line


def _batches(lines: list[str]) -> list[str]:
    """Bulk bodies of at most `_BULK_BYTES` (or one oversized line each), in order."""
    batches: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode())
        if current and size + length > _BULK_BYTES:
            batches.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += length
    if current:
        batches.append("".join(current))
    return batches


def _source(chunk: Chunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "document_id": chunk.document_id,
        "space_id": chunk.space_id,
        "tenant": chunk.tenant,
        "path": chunk.path,
        PATH_SCOPES_FIELD: path_scopes(chunk.path),
        "chunk_index": chunk.chunk_index,
        "doc_version": chunk.doc_version,
        # The heading trail is a second value of `content`: BM25 sees the chunk's text and
        # its headings as one field; `_chunk` reads the first value back as the text.
        "content": [chunk.content, chunk.heading] if chunk.heading else chunk.content,
    }


def _chunk(source: dict[str, Any]) -> Chunk:
    content = source.get("content") or ""
    return Chunk(
        chunk_id=source["chunk_id"],
        document_id=source["document_id"],
        space_id=source["space_id"],
        tenant=source.get("tenant") or "",
        path=source["path"],
        chunk_index=int(source["chunk_index"]),
        doc_version=int(source["doc_version"]),
        content=content[0] if isinstance(content, list) else content,
        heading=content[1] if isinstance(content, list) and len(content) > 1 else "",
    )


def _raise_item_errors(response: dict[str, Any]) -> None:
    """Raises for the first failed bulk item that is not an expected conflict: 409 is a
    newer version already stored or a stale chunk changed since we looked; 404 a stale
    chunk someone else deleted first."""
    for item in response["items"]:
        ((op, result),) = item.items()
        status = result.get("status", 200)
        if status < 300 or status in (404, 409):
            continue
        error = result.get("error") or {}
        reason = error.get("reason", "") if isinstance(error, dict) else str(error)
        kind = error.get("type", "") if isinstance(error, dict) else ""
        raise IndexUnavailable(
            f"OpenSearch refused a bulk {op} of chunk {result.get('_id')}: {status} {kind} "
            f"{reason}".rstrip(),
            metadata={"backend": "opensearch", "status": str(status)},
        )


def _error_type(exc: TransportError) -> str:
    info = exc.info
    if isinstance(info, dict):
        error = info.get("error")
        if isinstance(error, dict):
            return str(error.get("type", ""))
    return str(exc.error)


@asynccontextmanager
async def _mapped(operation: str) -> AsyncIterator[None]:
    """Turns the client's errors into IndexUnavailable, saying what failed and how."""
    try:
        yield
    except ConnectionTimeout:
        raise IndexUnavailable(
            f"OpenSearch {operation} timed out", metadata={"backend": "opensearch"}
        ) from None
    except OpenSearchConnectionError as exc:
        raise IndexUnavailable(
            f"OpenSearch {operation} failed: cannot reach the cluster ({exc.error})",
            metadata={"backend": "opensearch"},
        ) from None
    except TransportError as exc:
        raise IndexUnavailable(
            f"OpenSearch {operation} failed: {exc.status_code} {_error_type(exc)}",
            metadata={"backend": "opensearch", "status": str(exc.status_code)},
        ) from None
    except (OpenSearchException, TimeoutError) as exc:
        raise IndexUnavailable(
            f"OpenSearch {operation} failed: {type(exc).__name__}: {exc}",
            metadata={"backend": "opensearch"},
        ) from None
