"""The search part of `engram dev`: SearchService on the embedded indexes."""

from __future__ import annotations

import contextlib

from engram.allinone import EmbeddedCore, service_name
from engram.indexer.embedded import EmbeddedIndexing
from engram.runtime.server import ServiceRegistration
from engram.search.embedders import ModelEmbedders
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchOptions, SearchService
from engram.search.servicer import SearchServicer
from engram.v1 import search_pb2, search_pb2_grpc


def build_embedded_search(
    core: EmbeddedCore, indexing: EmbeddedIndexing, stack: contextlib.AsyncExitStack
) -> SearchService:
    """Registers SearchService on the core's server; returns the service (for tests). Its
    query embedders close when `stack` unwinds."""
    settings = core.settings
    embedders = ModelEmbedders.from_settings(settings)
    stack.push_async_callback(embedders.aclose)
    service = SearchService(
        indexing.keyword,
        indexing.vector,
        embedders,
        core.authorizer,
        options=SearchOptions.from_settings(settings),
        query_cache=QueryEmbeddingCache(settings.search_query_cache_size),
    )
    core.registrations.append(
        ServiceRegistration(
            service_name(search_pb2, "SearchService"),
            lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(
                SearchServicer(service), server
            ),
        )
    )
    return service
