"""The registry of services: each one's gRPC name and how its servicer is added to a
server. `engram dev` registers all of them on one server, `engram serve <name>` one."""

from __future__ import annotations

from engram.authz.service import AuthzService
from engram.authz.servicer import AuthzServicer
from engram.domain.ports import Authorizer
from engram.indexer.service import IndexerService
from engram.indexer.servicer import IndexerServicer
from engram.maintenance.service import MaintenanceService
from engram.maintenance.servicer import MaintenanceServicer
from engram.quota.service import QuotaService
from engram.quota.servicer import QuotaServicer
from engram.runtime.server import ServiceRegistration
from engram.search.service import SearchService
from engram.search.servicer import SearchServicer
from engram.storage.service import StorageService
from engram.storage.servicer import StorageServicer
from engram.v1 import (
    authz_pb2,
    authz_pb2_grpc,
    indexer_pb2,
    indexer_pb2_grpc,
    maintenance_pb2,
    maintenance_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
    storage_pb2,
    storage_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from engram.workspace.service import WorkspaceService
from engram.workspace.servicer import WorkspaceServicer


def _name(descriptor_module: object, service: str) -> str:
    return str(descriptor_module.DESCRIPTOR.services_by_name[service].full_name)  # type: ignore[attr-defined]


def storage(service: StorageService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(storage_pb2, "StorageService"),
        lambda server: storage_pb2_grpc.add_StorageServiceServicer_to_server(
            StorageServicer(service), server
        ),
    )


def quota(service: QuotaService, authorizer: Authorizer) -> ServiceRegistration:
    return ServiceRegistration(
        _name(quota_pb2, "QuotaService"),
        lambda server: quota_pb2_grpc.add_QuotaServiceServicer_to_server(
            QuotaServicer(service, authorizer), server
        ),
    )


def authz(service: AuthzService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(authz_pb2, "AuthzService"),
        lambda server: authz_pb2_grpc.add_AuthzServiceServicer_to_server(
            AuthzServicer(service), server
        ),
    )


def indexer(service: IndexerService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(indexer_pb2, "IndexerService"),
        lambda server: indexer_pb2_grpc.add_IndexerServiceServicer_to_server(
            IndexerServicer(service), server
        ),
    )


def search(service: SearchService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(search_pb2, "SearchService"),
        lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(
            SearchServicer(service), server
        ),
    )


def workspace(service: WorkspaceService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(workspace_pb2, "WorkspaceService"),
        lambda server: workspace_pb2_grpc.add_WorkspaceServiceServicer_to_server(
            WorkspaceServicer(service), server
        ),
    )


def maintenance(service: MaintenanceService) -> ServiceRegistration:
    return ServiceRegistration(
        _name(maintenance_pb2, "MaintenanceService"),
        lambda server: maintenance_pb2_grpc.add_MaintenanceServiceServicer_to_server(
            MaintenanceServicer(service), server
        ),
    )
