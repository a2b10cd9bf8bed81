"""The search part of `engram dev`: SearchService on the embedded indexes."""

from __future__ import annotations

from engram.allinone import EmbeddedCore, service_name
from engram.indexer.embedded import EmbeddedIndexing
from engram.runtime.server import ServiceRegistration
from engram.search.ports import QueryEmbedders
from engram.search.query_cache import QueryEmbeddingCache
from engram.search.service import SearchOptions, SearchService
from engram.search.servicer import SearchServicer
from engram.v1 import search_pb2, search_pb2_grpc


def query_embedders(indexing: EmbeddedIndexing) -> QueryEmbedders:
    """The indexer's embedders by model: the configured one and, during a model switch, the
    still active old model's, so a query is embedded by the model whose collection the
    alias names."""
    return indexing.models


def build_embedded_search(core: EmbeddedCore, indexing: EmbeddedIndexing) -> SearchService:
    """Registers SearchService on the core's server; returns the service (for tests)."""
    settings = core.settings
    service = SearchService(
        indexing.keyword,
        indexing.vector,
        query_embedders(indexing),
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
