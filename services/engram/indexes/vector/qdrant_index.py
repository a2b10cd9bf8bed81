"""QdrantVectorIndex: the production vector index on a Qdrant server.

One collection per embedding model, `engram-chunks-<model>`, cosine distance, the model id
and dimension in the collection's metadata; the alias `engram-chunks` names the active one
and is swapped in one `update_collection_aliases` call. Points carry the chunk's fields as
payload with a tenant-optimised keyword index on `space_id`, so every search is filtered to
its spaces inside Qdrant.

`path_prefix` selects a directory or one document, as in the keyword indexes
(`engram.domain.scoping`): each point carries `path_dirs`, every ancestor
directory of its path and the path itself, and a search matches the normalised prefix
against it with a keyword index (Qdrant has no prefix condition). Local mode
(`AsyncQdrantClient(path=...)`) runs the same code for the contract tests; it ignores
payload indexes and scans in Python, so it only suits small data.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import numpy as np
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ApiException

from engram.domain.chunks import Chunk, IndexedDocument, ModelInfo, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import PATH_SCOPES_FIELD, normalize_path_prefix, path_scopes
from engram.indexes.ports import IndexModelMismatch, IndexUnavailable, Vectors
from engram.indexes.vector.points import check_chunks, chunk_of, payload, point_id

__all__ = ["QdrantVectorIndex", "point_id"]

ALIAS_TTL_SECONDS = 2.0
_SCROLL_PAGE = 256
_UPSERT_BATCH = 256


class QdrantVectorIndex:
    """The `VectorIndex` on Qdrant (see the module docstring)."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        *,
        alias: str = "engram-chunks",
        collection_prefix: str = "engram-chunks-",
    ) -> None:
        self._client = client
        self._alias = alias
        self._prefix = collection_prefix
        # Model info per model id, learnt from collection metadata (a model's dimension
        # never changes under its id, so this never goes stale).
        self._models: dict[str, ModelInfo] = {}
        self._alias_target: tuple[str | None, float] | None = None
        # Upsert-then-delete of one path must not interleave with another replace of it.
        self._path_locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        timeout: int = 10,
        check_compatibility: bool = True,
    ) -> QdrantVectorIndex:
        """An index on a Qdrant server. The client connects lazily; with
        `check_compatibility` it also compares client and server versions in a background
        thread, warning on a mismatch or an unreachable server."""
        return cls(
            AsyncQdrantClient(
                url=url,
                api_key=api_key,
                timeout=timeout,
                check_compatibility=check_compatibility,
            )
        )

    def collection_name(self, model_id: str) -> str:
        sanitised = re.sub(r"[^A-Za-z0-9_.-]", "-", model_id)
        if sanitised == model_id:
            return self._prefix + model_id
        # Sanitising can map two ids to one name: the digest keeps them apart.
        digest = hashlib.sha256(model_id.encode("utf-8")).hexdigest()[:8]
        return f"{self._prefix}{sanitised}-{digest}"

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        async with self._errors("open"):
            await self._client.get_collections()

    async def ping(self) -> bool:
        """True when Qdrant answers (the health probe; never on the request path)."""
        async with self._errors("ping"):
            await self._client.get_collections()
        return True

    async def close(self) -> None:
        async with self._errors("close"):
            await self._client.close()

    # --- collections -------------------------------------------------------------------------

    async def ensure_collection(self, model: ModelInfo) -> None:
        if model.dimension < 1 or not model.model_id:
            raise InvalidArgument(f"invalid model {model!r}: needs an id and a dimension >= 1")
        name = self.collection_name(model.model_id)
        known = await self._model_of(name)
        if known is None:
            async with self._errors("create collection"):
                try:
                    await self._client.create_collection(
                        name,
                        vectors_config=qm.VectorParams(
                            size=model.dimension, distance=qm.Distance.COSINE
                        ),
                        metadata={"model_id": model.model_id, "dimension": model.dimension},
                    )
                except (ApiException, ValueError):
                    # Another replica may have created it first; the re-read below decides.
                    if not await self._client.collection_exists(name):
                        raise
            known = await self._model_of(name)
            if known is None:
                raise IndexUnavailable(f"collection {name} vanished while being created")
            await self._ensure_payload_indexes(name)
        if known.model_id != model.model_id or known.dimension != model.dimension:
            raise IndexModelMismatch(
                f"collection {name} holds model {known.model_id!r} of dimension "
                f"{known.dimension}, not {model.model_id!r} of dimension {model.dimension}: "
                "a changed model needs a new model id",
                field="model",
            )
        self._models[model.model_id] = known

    async def active_model(self) -> ModelInfo | None:
        name = await self._alias_collection(fresh=True)
        return None if name is None else await self._model_of(name)

    async def activate(self, model_id: str) -> None:
        await self._require(model_id)
        operations: list[qm.CreateAliasOperation | qm.DeleteAliasOperation] = []
        if await self._alias_collection(fresh=True) is not None:
            operations.append(
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self._alias))
            )
        target = self.collection_name(model_id)
        operations.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=target, alias_name=self._alias)
            )
        )
        async with self._errors("activate"):
            # One request: readers see the old collection or the new one, never neither.
            await self._client.update_collection_aliases(change_aliases_operations=operations)
        self._alias_target = (target, time.monotonic())

    async def collections(self) -> list[ModelInfo]:
        async with self._errors("list collections"):
            response = await self._client.get_collections()
        found = []
        for description in response.collections:
            if description.name.startswith(self._prefix):
                model = await self._model_of(description.name)
                if model is not None:
                    found.append(model)
        return sorted(found, key=lambda m: m.model_id)

    async def drop_collection(self, model_id: str) -> None:
        name = self.collection_name(model_id)
        async with self._errors("drop collection"):
            if await self._client.collection_exists(name):
                # Qdrant drops the collection's aliases with it.
                await self._client.delete_collection(name)
        self._models.pop(model_id, None)
        self._alias_target = None

    # --- chunks ------------------------------------------------------------------------------

    async def replace_chunks(
        self, model_id: str, space_id: str, path: str, chunks: Sequence[Chunk], vectors: Vectors
    ) -> None:
        model = await self._require(model_id)
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.size == 0 and not chunks:
            matrix = matrix.reshape(0, model.dimension)
        if matrix.ndim != 2 or matrix.shape[1] != model.dimension:
            raise IndexModelMismatch(
                f"vectors of shape {matrix.shape} offered to {model_id!r}, whose dimension is "
                f"{model.dimension}",
                field="vectors",
            )
        check_chunks(space_id, path, chunks, matrix.shape[0])
        name = self.collection_name(model_id)
        scopes = path_scopes(path)
        points = [
            qm.PointStruct(
                id=point_id(chunk.chunk_id),
                vector=matrix[i].tolist(),
                payload=payload(chunk, scopes),
            )
            for i, chunk in enumerate(chunks)
        ]
        stale = qm.Filter(
            must=_path_conditions(space_id, path),
            must_not=[qm.HasIdCondition(has_id=[p.id for p in points])] if points else None,
        )
        lock = self._path_locks.get((space_id, path))
        if lock is None:
            lock = self._path_locks[(space_id, path)] = asyncio.Lock()
        async with lock, self._errors("replace chunks"):
            # A 2 MiB document is ~4,500 chunks: keep each request well under Qdrant's
            # request size limit.
            for start in range(0, len(points), _UPSERT_BATCH):
                batch = points[start : start + _UPSERT_BATCH]
                await self._client.upsert(name, points=batch, wait=True)
            # By id, not by chunk_index: a path re-created as a new document has new chunk ids
            # at the same indexes, and its predecessor's points must go too.
            await self._client.delete(
                name, points_selector=qm.FilterSelector(filter=stale), wait=True
            )

    async def delete_chunks(self, space_id: str, path: str) -> None:
        selector = qm.FilterSelector(filter=qm.Filter(must=_path_conditions(space_id, path)))
        for model in await self.collections():
            async with self._errors("delete chunks"):
                await self._client.delete(
                    self.collection_name(model.model_id), points_selector=selector, wait=True
                )

    async def delete_space(self, space_id: str) -> None:
        selector = qm.FilterSelector(
            filter=qm.Filter(
                must=[qm.FieldCondition(key="space_id", match=qm.MatchValue(value=space_id))]
            )
        )
        for model in await self.collections():
            async with self._errors("delete space"):
                await self._client.delete(
                    self.collection_name(model.model_id), points_selector=selector, wait=True
                )

    async def search(
        self,
        space_ids: Sequence[str],
        vector: Vectors,
        *,
        limit: int,
        path_prefix: str = "",
        model_id: str | None = None,
    ) -> list[ScoredChunk]:
        if model_id is None:
            name = await self._alias_collection(fresh=False)
            if name is None:
                return []
            cached = next(
                (m for m in self._models.values() if self.collection_name(m.model_id) == name), None
            )
            model = cached or await self._model_of(name)
            if model is None:
                return []
            self._models[model.model_id] = model
        else:
            model = await self._require(model_id)
            name = self.collection_name(model_id)
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (model.dimension,):
            raise IndexModelMismatch(
                f"a query vector of shape {query.shape} for {model.model_id!r}, whose "
                f"dimension is {model.dimension}",
                field="vector",
            )
        if limit <= 0 or not space_ids:
            return []
        conditions: list[qm.Condition] = [
            qm.FieldCondition(key="space_id", match=qm.MatchAny(any=sorted(set(space_ids))))
        ]
        scope = normalize_path_prefix(path_prefix)
        if scope:
            conditions.append(
                qm.FieldCondition(key=PATH_SCOPES_FIELD, match=qm.MatchValue(value=scope))
            )
        async with self._errors("search"):
            response = await self._client.query_points(
                name,
                query=query.tolist(),
                query_filter=qm.Filter(must=conditions),
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return [
            ScoredChunk(chunk=chunk_of(point.payload or {}), score=float(point.score))
            for point in response.points
        ]

    async def chunks_of(
        self, space_id: str, path: str, *, model_id: str | None = None
    ) -> list[Chunk]:
        if model_id is None:
            name = await self._alias_collection(fresh=False)
            if name is None:
                return []
        else:
            await self._require(model_id)
            name = self.collection_name(model_id)
        found: list[Chunk] = []
        offset: Any = None
        async with self._errors("chunks_of"):
            while True:
                points, offset = await self._client.scroll(
                    name,
                    scroll_filter=qm.Filter(must=_path_conditions(space_id, path)),
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=True,
                    with_vectors=False,
                )
                found.extend(chunk_of(point.payload or {}) for point in points)
                if offset is None:
                    break
        return sorted(found, key=lambda chunk: chunk.chunk_index)

    async def indexed_documents(
        self, space_id: str, *, model_id: str | None = None
    ) -> dict[str, IndexedDocument]:
        if model_id is None:
            name = await self._alias_collection(fresh=True)
            if name is None:
                return {}
        else:
            await self._require(model_id)
            name = self.collection_name(model_id)
        entries: list[tuple[str, str, int]] = []
        offset: Any = None
        space_filter = qm.Filter(
            must=[qm.FieldCondition(key="space_id", match=qm.MatchValue(value=space_id))]
        )
        async with self._errors("indexed_documents"):
            while True:
                points, offset = await self._client.scroll(
                    name,
                    scroll_filter=space_filter,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=["path", "document_id", "doc_version"],
                    with_vectors=False,
                )
                for point in points:
                    payload = point.payload or {}
                    entries.append(
                        (
                            str(payload["path"]),
                            str(payload["document_id"]),
                            int(payload["doc_version"]),
                        )
                    )
                if offset is None:
                    break
        return indexed_documents(entries)

    # --- internals ---------------------------------------------------------------------------

    @asynccontextmanager
    async def _errors(self, operation: str) -> AsyncIterator[None]:
        """Maps every client failure to IndexUnavailable (search degrades on it)."""
        try:
            yield
        except (ApiException, httpx.HTTPError, OSError, RuntimeError, ValueError) as error:
            raise IndexUnavailable(f"qdrant {operation} failed: {error}") from None

    async def _model_of(self, name: str) -> ModelInfo | None:
        """The model a collection holds, or None if there is no such collection."""
        async with self._errors("read collection"):
            if not await self._client.collection_exists(name):
                return None
            info = await self._client.get_collection(name)
        metadata = info.config.metadata or {}
        model_id = metadata.get("model_id")
        params = info.config.params.vectors
        size = params.size if isinstance(params, qm.VectorParams) else None
        if not isinstance(model_id, str) or size is None:
            raise IndexUnavailable(
                f"collection {name} has no engram model metadata: it was not created by engram"
            )
        return ModelInfo(model_id=model_id, dimension=int(size))

    async def _require(self, model_id: str) -> ModelInfo:
        known = self._models.get(model_id)
        if known is None:
            known = await self._model_of(self.collection_name(model_id))
            if known is None:
                raise IndexModelMismatch(
                    f"no vector collection for model {model_id!r}: ensure_collection first",
                    field="model_id",
                )
            self._models[model_id] = known
        return known

    async def _alias_collection(self, *, fresh: bool) -> str | None:
        """The collection the alias names; cached briefly for searches, since another
        replica may move it at any time."""
        now = time.monotonic()
        if not fresh and self._alias_target is not None:
            target, at = self._alias_target
            if now - at < ALIAS_TTL_SECONDS:
                return target
        async with self._errors("read alias"):
            response = await self._client.get_aliases()
        target = next(
            (a.collection_name for a in response.aliases if a.alias_name == self._alias), None
        )
        self._alias_target = (target, now)
        return target

    async def _ensure_payload_indexes(self, name: str) -> None:
        async with self._errors("create payload indexes"):
            await self._client.create_payload_index(
                name,
                "space_id",
                field_schema=qm.KeywordIndexParams(
                    type=qm.KeywordIndexType.KEYWORD, is_tenant=True
                ),
            )
            await self._client.create_payload_index(
                name, "path", field_schema=qm.PayloadSchemaType.KEYWORD
            )
            await self._client.create_payload_index(
                name,
                PATH_SCOPES_FIELD,
                field_schema=qm.PayloadSchemaType.KEYWORD,
            )
            await self._client.create_payload_index(
                name, "document_id", field_schema=qm.PayloadSchemaType.KEYWORD
            )


def _path_conditions(space_id: str, path: str) -> list[qm.Condition]:
    return [
        qm.FieldCondition(key="space_id", match=qm.MatchValue(value=space_id)),
        qm.FieldCondition(key="path", match=qm.MatchValue(value=path)),
    ]
