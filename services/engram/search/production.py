"""`engram serve search`: SearchService on OpenSearch and Qdrant.

Needs ENGRAM_OPENSEARCH_URL, ENGRAM_QDRANT_URL and ENGRAM_MONGO_URI (personal access tokens
live there; JWTs are checked with ENGRAM_JWT_SECRET or ENGRAM_JWKS_PATH); a missing one is
a startup error naming it. Queries are embedded by the active vector model, rebuilt from its
id with the embedding provider settings (`engram.search.embedders`). An index that does not
answer at startup does not stop the service: searches degrade to the other index while it is
opened again in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from engram.authz.enforcement import PolicyAuthorizer
from engram.indexer.keyword.opensearch_index import OpenSearchKeywordIndex
from engram.indexer.ports import IndexUnavailable, KeywordIndex, VectorIndex
from engram.indexer.vector.qdrant_index import QdrantVectorIndex
from engram.runtime.interceptors import Authenticator
from engram.runtime.retrying import log_before_retry
from engram.runtime.server import GrpcServer, ServiceRegistration
from engram.runtime.settings import Settings
from engram.search.embedders import ModelEmbedders
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchOptions, SearchService
from engram.search.servicer import SearchServicer
from engram.v1 import search_pb2, search_pb2_grpc

log = logging.getLogger(__name__)

REOPEN_FIRST_DELAY_SECONDS = 1.0
REOPEN_MAX_DELAY_SECONDS = 30.0


@contextlib.asynccontextmanager
async def search_on_backends(
    settings: Settings,
    *,
    authenticator: Authenticator | None = None,
    vector: VectorIndex | None = None,
) -> AsyncIterator[GrpcServer]:
    """Serves SearchService until the context exits.

    `authenticator` replaces the token authenticator (and with it the need for MongoDB);
    `vector` replaces the Qdrant server at ENGRAM_QDRANT_URL (tests use Qdrant local mode).
    """
    from engram.services import require

    require(
        settings,
        "opensearch_url",
        *([] if vector is not None else ["qdrant_url"]),
        *([] if authenticator is not None else ["mongo_uri"]),
    )
    async with contextlib.AsyncExitStack() as stack:
        if authenticator is None:
            from engram.authz.tokens import authenticator_from_settings
            from engram.backends.mongo import connect

            assert settings.mongo_uri is not None
            client, database = connect(settings.mongo_uri.get_secret_value(), settings.mongo_db)
            stack.push_async_callback(client.close)
            authenticator = await authenticator_from_settings(settings, database)
        keyword = OpenSearchKeywordIndex.from_settings(settings)
        await _open_or_keep_trying(keyword, "keyword", stack)
        if vector is None:
            assert settings.qdrant_url is not None
            api_key = settings.qdrant_api_key
            vector = QdrantVectorIndex.connect(
                settings.qdrant_url,
                api_key=api_key.get_secret_value() if api_key is not None else None,
            )
        await _open_or_keep_trying(vector, "vector", stack)
        embedders = ModelEmbedders.from_settings(settings)
        stack.push_async_callback(embedders.aclose)
        service = SearchService(
            keyword,
            vector,
            embedders,
            PolicyAuthorizer(),
            options=SearchOptions.from_settings(settings),
            query_cache=QueryEmbeddingCache(settings.search_query_cache_size),
        )
        server = GrpcServer(
            settings,
            [
                ServiceRegistration(
                    search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name,
                    lambda grpc_server: search_pb2_grpc.add_SearchServiceServicer_to_server(
                        SearchServicer(service), grpc_server
                    ),
                )
            ],
            authenticator,
        )
        await server.start()
        stack.push_async_callback(server.stop)
        yield server


async def _open_or_keep_trying(
    index: KeywordIndex | VectorIndex, backend: str, stack: contextlib.AsyncExitStack
) -> None:
    """Opens the index now, or keeps opening it in the background while searches degrade."""
    stack.push_async_callback(index.close)
    try:
        await index.open()
        return
    except IndexUnavailable as error:
        log.warning(
            "index unavailable at startup; searching without it until it answers",
            extra={"backend": backend, "error": error.message},
        )
    task = asyncio.create_task(_keep_opening(index, backend))
    stack.push_async_callback(_cancel, task)


async def _keep_opening(index: KeywordIndex | VectorIndex, backend: str) -> None:
    """Tries again 1 s, 2 s, 4 s, ... (at most 30 s) apart until the index opens."""

    await asyncio.sleep(REOPEN_FIRST_DELAY_SECONDS)
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(IndexUnavailable),
        wait=wait_exponential(
            multiplier=2 * REOPEN_FIRST_DELAY_SECONDS, max=REOPEN_MAX_DELAY_SECONDS
        ),
        before_sleep=log_before_retry(log, "index still unavailable", backend=backend),
    ):
        with attempt:
            await index.open()
    log.info("index opened", extra={"backend": backend})


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
