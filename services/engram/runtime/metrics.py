"""Prometheus metrics shared by every service, and the side HTTP endpoint."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram, start_http_server

log = logging.getLogger(__name__)

RPC_SECONDS = Histogram(
    "engram_grpc_server_handling_seconds",
    "Time to handle a gRPC call, by method and status code.",
    ("method", "code"),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RPC_TOTAL = Counter(
    "engram_grpc_server_handled_total",
    "gRPC calls handled, by method and status code.",
    ("method", "code"),
)
INTERNAL_ERRORS = Counter(
    "engram_internal_errors_total",
    "Calls that failed on an unexpected error, by method.",
    ("method",),
)


def start_metrics_endpoint(host: str, port: int) -> int:
    """Serves /metrics on host:port (0 = disabled); returns the port or 0."""
    if port == 0:
        return 0
    server, _thread = start_http_server(port, addr=host)
    bound = int(server.server_address[1])
    log.info("metrics endpoint listening", extra={"addr": f"{host}:{bound}"})
    return bound
