"""gRPC server bootstrap: interceptors, health, reflection, metrics, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engram.domain.errors import Misconfigured
from engram.domain.policy import unlisted_methods
from engram.runtime.health import Dependency, DependencyWatch
from engram.runtime.interceptors import Authenticator, ServerInterceptor
from engram.runtime.metrics import HttpEndpoint
from engram.runtime.rate_limit import RateLimiter, RateLimits, RateLimitStore
from engram.runtime.settings import Settings
from engram.runtime.tls import ServerTls, server_credentials

log = logging.getLogger(__name__)

# A backend that does not answer its probe within this long counts as unreachable.
PROBE_TIMEOUT_SECONDS = 2.0


def server_options(settings: Settings, *, reuse_port: bool = False) -> list[tuple[str, int]]:
    """The limits every engram server sets explicitly (not left to gRPC's defaults).
    `reuse_port`: the port is shared with sibling worker processes (SO_REUSEPORT)."""
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # HTTP/2 streams (calls) one connection may have open at once.
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        ("grpc.so_reuseport", int(reuse_port)),
    ]
    if settings.grpc_max_connection_age_seconds:
        options += [
            ("grpc.max_connection_age_ms", _ms(settings.grpc_max_connection_age_seconds)),
            (
                "grpc.max_connection_age_grace_ms",
                _ms(settings.grpc_max_connection_age_grace_seconds),
            ),
        ]
    if settings.grpc_keepalive_seconds:
        keepalive = _ms(settings.grpc_keepalive_seconds)
        options += [
            ("grpc.keepalive_time_ms", keepalive),
            ("grpc.keepalive_timeout_ms", _ms(settings.grpc_keepalive_timeout_seconds)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # Accept clients' pings as often as engram's own clients send them (the default
            # 5 min would answer them with GOAWAY "too_many_pings").
            ("grpc.http2.min_ping_interval_without_data_ms", min(keepalive, 10_000)),
        ]
    return options


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


# What else may be done about a taken port, by port.
OFF_HINT = {"metrics": " (0 turns it off)"}


class PortInUse(OSError):
    """A port this process must bind is taken: `what` ("gRPC", "metrics") names which, and
    `setting` the variable that chooses another."""

    def __init__(self, what: str, host: str, port: int, setting: str) -> None:
        self.what, self.host, self.port, self.setting = what, host, port, setting
        super().__init__(
            errno.EADDRINUSE,
            f"the {what} port {host}:{port} is already in use (another engram?): stop what "
            f"holds it, or choose another port with {setting}{OFF_HINT.get(what, '')}",
        )

    def __str__(self) -> str:
        return str(self.strerror)


def check_port_free(what: str, host: str, port: int, setting: str) -> None:
    """Raises PortInUse when `host:port` cannot be bound (as gRPC binds: SO_REUSEADDR, no
    SO_REUSEPORT), so a taken port is one clear error instead of gRPC's log line and
    traceback; port 0 (any free port) is always free. A port taken between this check and
    the bind is still reported by the bind."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # an unresolvable host: the bind itself says so
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise PortInUse(what, host, port, setting) from None
                # Anything else (an address family this host lacks): the bind decides.


def check_ports_free(settings: Settings) -> None:
    """Both ports of a server process (gRPC, and metrics unless off) are free to bind."""
    check_port_free("gRPC", settings.grpc_host, settings.grpc_port, "ENGRAM_GRPC_PORT")
    if settings.metrics_port:
        check_port_free(
            "metrics", settings.metrics_host, settings.metrics_port, "ENGRAM_METRICS_PORT"
        )


def server_tls(settings: Settings) -> ServerTls | None:
    """TLS of the gRPC port from ENGRAM_TLS_CERT_FILE / _KEY_FILE / _CLIENT_CA_FILE."""
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None and key is None:
        if settings.tls_client_ca_file is not None:
            raise Misconfigured(
                "ENGRAM_TLS_CLIENT_CA_FILE needs ENGRAM_TLS_CERT_FILE and ENGRAM_TLS_KEY_FILE"
            )
        return None
    if cert is None or key is None:
        raise Misconfigured("set both ENGRAM_TLS_CERT_FILE and ENGRAM_TLS_KEY_FILE, or neither")
    return ServerTls(cert, key, settings.tls_client_ca_file)


@dataclass(frozen=True, slots=True)
class ServiceRegistration:
    """One implemented service: its full name and how to add its servicer to a server."""

    name: str
    add_to_server: Callable[[grpc.aio.Server], None]


class GrpcServer:
    """A grpc.aio server with the engram interceptor chain, health and reflection.

    Health says SERVING only once `start` returns (the caller loads what the first request
    needs before) and while every backend in `dependencies` answers its probe.
    """

    def __init__(
        self,
        settings: Settings,
        registrations: Sequence[ServiceRegistration],
        authenticator: Authenticator,
        dependencies: Sequence[Dependency] = (),
        *,
        rate_limit_store: RateLimitStore | None = None,
        reuse_port: bool = False,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        self._settings = settings
        self._reuse_port = reuse_port
        self._registrations = registrations
        self._health = health.aio.HealthServicer()
        limiter = (
            RateLimiter(
                rate_limit_store,
                RateLimits(
                    per_window=settings.rate_limit_per_minute,
                    window_seconds=60,
                    search_min_spaces=settings.rate_limit_search_min_spaces,
                ),
            )
            if rate_limit_store is not None
            else None
        )
        self._watch = DependencyWatch(
            dependencies,
            self._set_serving,
            interval=settings.health_probe_seconds,
            timeout=PROBE_TIMEOUT_SECONDS,
        )
        self._serving = False
        self._endpoint: HttpEndpoint | None = None
        self._server = grpc.aio.server(
            interceptors=[
                *interceptors,
                ServerInterceptor(authenticator, access_log=settings.access_log, limiter=limiter),
            ],
            options=server_options(settings, reuse_port=reuse_port),
            # Calls beyond this are refused by gRPC with RESOURCE_EXHAUSTED.
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs or None,
        )
        self.port = 0
        self.metrics_port = 0
        self._stopped = asyncio.Event()

    async def start(self) -> int:
        """Binds, registers every service, marks them SERVING; returns the bound port."""
        unlisted = unlisted_methods(served_methods(r.name for r in self._registrations))
        if unlisted:
            raise RuntimeError(
                f"no authorization rule for {', '.join(unlisted)}: add rows to "
                "engram.domain.policy.RPC_ACTIONS (the action it takes) and ACTION_POLICY"
            )
        for registration in self._registrations:
            registration.add_to_server(self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        names = [r.name for r in self._registrations]
        reflection.enable_server_reflection(
            [
                *names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self._server,
        )
        settings = self._settings
        if not self._reuse_port:  # a shared port is bound by the siblings already
            check_ports_free(settings)
        address = f"{settings.grpc_host}:{settings.grpc_port}"
        tls = server_tls(settings)
        try:
            if tls is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, server_credentials(tls))
        except RuntimeError:  # grpc: "Failed to bind to address ..."
            self.port = 0
        if self.port == 0:
            # Taken since the check (or not bindable at all): the check names which.
            check_port_free("gRPC", settings.grpc_host, settings.grpc_port, "ENGRAM_GRPC_PORT")
            raise OSError(f"could not bind gRPC on {address}")
        if settings.metrics_port:
            try:
                self._endpoint = HttpEndpoint(
                    settings.metrics_host, settings.metrics_port, self.ready
                )
            except OSError as error:
                await self._server.stop(None)  # releases the gRPC port bound above
                if error.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        "metrics",
                        settings.metrics_host,
                        settings.metrics_port,
                        "ENGRAM_METRICS_PORT",
                    ) from None
                raise
            self.metrics_port = self._endpoint.port
        await self._server.start()
        # SERVING now unless a backend is down; the watch keeps it current from here on.
        await self._watch.check()
        self._watch.start()
        log.info(
            "serving",
            extra={
                "addr": f"{self._settings.grpc_host}:{self.port}",
                "services": names,
                "tls": "mtls" if tls and tls.client_ca_file else "tls" if tls else "off",
            },
        )
        return self.port

    async def stop(self) -> None:
        """Health to NOT_SERVING, a short drain, then stop with the configured grace."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self._watch.stop()
        self._serving = False
        await self._health.enter_graceful_shutdown()
        await self._server.stop(self._settings.shutdown_grace_seconds)
        if self._endpoint is not None:
            self._endpoint.close()
        log.info("stopped")

    @property
    def services(self) -> list[str]:
        """The full names of the services this server registers."""
        return [r.name for r in self._registrations]

    def ready(self) -> bool:
        """Every service SERVING (what /readyz answers)."""
        return self._serving

    @property
    def unreachable(self) -> frozenset[str]:
        """The dependencies whose last probe failed."""
        return self._watch.down

    async def _set_serving(self, healthy: bool) -> None:
        if self._stopped.is_set():
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if healthy
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *(r.name for r in self._registrations)):
            await self._health.set(name, status)
        self._serving = healthy

    async def wait(self) -> None:
        await self._server.wait_for_termination()


def served_methods(services: Iterable[str]) -> list[str]:
    """`/package.Service/Method` of every method of the named (imported) services."""
    pool = descriptor_pool.Default()
    return [
        f"/{name}/{method.name}"
        for name in services
        for method in pool.FindServiceByName(name).methods
    ]


async def serve(server: GrpcServer, stack: contextlib.AsyncExitStack) -> GrpcServer:
    """Starts the server (the last step of every process) and stops it when `stack` unwinds."""
    await server.start()
    stack.push_async_callback(server.stop)
    return server


def stop_on_signals(stop: Callable[[], object]) -> None:
    """Calls `stop` on SIGTERM and SIGINT (once the event loop runs)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
