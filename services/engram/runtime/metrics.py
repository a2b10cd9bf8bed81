"""Prometheus metrics shared by every service, and the side HTTP endpoint.

The endpoint serves `/metrics`, `/healthz` (200 while the process runs) and `/readyz`
(200 only while every service is SERVING, else 503) for load balancers and probes that
cannot speak gRPC health; any other path is 404.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

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


class HttpEndpoint:
    """The side HTTP server (a daemon thread); `ready()` is read on each /readyz."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool],
        *,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        handler = _handler(ready, registry)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        log.info("metrics endpoint listening", extra={"addr": f"{host}:{self.port}"})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(
    ready: Callable[[], bool], registry: CollectorRegistry
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                up = ready()
                self._send(200 if up else 503, b"ready\n" if up else b"not ready\n")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Scrapes and probes are not logged."""

    return Handler
