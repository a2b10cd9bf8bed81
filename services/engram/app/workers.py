"""`engram serve search --workers N`: N search processes on one port, so search uses every
core (one event loop runs the server, the service and the query batching per process).

gRPC Python's pre-fork pattern (grpc/examples/python/multiprocessing): the parent holds the
port with a bound, never-listening SO_REUSEPORT socket (so port 0 works and the port stays
ours across worker restarts), then starts the workers; each binds the same port with
`grpc.so_reuseport` and the kernel spreads new connections over them. The workers are
started with `spawn`, not `fork`: the parent has imported gRPC and may run threads, and
gRPC supports fork only before either.

The parent supervises:
- health: each worker registers gRPC health itself (a probe reaches one of them); the
  parent's /readyz is 200 only while every worker is SERVING, its /healthz while it runs;
- metrics: the workers write prometheus-client's multiprocess files into a directory of the
  parent's, which serves them merged on the metrics port (`engram_worker_calls` keeps one
  series per live worker, labelled by pid);
- drain: SIGTERM (or SIGINT) is passed to every worker, which turns health NOT_SERVING,
  lets calls in flight finish (ENGRAM_SHUTDOWN_GRACE_SECONDS) and exits; a worker still
  running after the grace is killed;
- a worker that dies after serving is replaced; one that dies before it ever served (bad
  settings, unreachable backends) stops the whole command, exit code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from multiprocessing.process import BaseProcess
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Gauge, multiprocess

from engram.app.config import MongoNeeds, OpenSearchNeeds, require
from engram.app.production import run_service, search_on_backends
from engram.domain.errors import EngramError
from engram.runtime.gc_pauses import freeze_startup_heap
from engram.runtime.logs import configure_logging
from engram.runtime.malloc_tuning import keep_large_allocations_mapped
from engram.runtime.metrics import HttpEndpoint
from engram.runtime.server import stop_on_signals
from engram.runtime.settings import Settings
from engram.runtime.tracing import configure_tracing

log = logging.getLogger(__name__)

WORKER_CALLS = Gauge(
    "engram_worker_calls",
    "Calls this worker process received since it started (one series per live worker).",
    multiprocess_mode="liveall",
)
# How often a worker publishes its readiness, and the parent checks its workers.
READY_SECONDS = 0.5
SUPERVISE_SECONDS = 0.5
# Beyond the shutdown grace, how long a stopping worker may take to exit before it is killed.
EXIT_MARGIN_SECONDS = 5.0


class CountCalls(grpc.aio.ServerInterceptor):
    """Counts each call this worker receives (WORKER_CALLS)."""

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        WORKER_CALLS.inc()
        return await continuation(handler_call_details)


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """A bound SO_REUSEPORT socket holding `host:port` (any free port for 0), never
    listening, so the kernel routes connections only to the workers; and the port."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    holder = socket.socket(family, kind, proto)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(address)
    except OSError:
        holder.close()
        raise
    return holder, int(holder.getsockname()[1])


class WorkerPool:
    """Runs and supervises the workers (see the module docstring)."""

    def __init__(self, settings: Settings, workers: int) -> None:
        self._settings = settings
        self._count = workers
        self._context = multiprocessing.get_context("spawn")
        # Per worker: 1 once it serves (never reset), 1 while its health is SERVING.
        self._served = self._context.Array("b", workers, lock=False)
        self._ready = self._context.Array("b", workers, lock=False)
        self._slots: list[BaseProcess] = []
        self._stop = threading.Event()
        self._metrics_dir: str | None = None
        self._endpoint: HttpEndpoint | None = None
        self._holder: socket.socket | None = None
        self.port = 0

    @property
    def pids(self) -> list[int]:
        return [process.pid or 0 for process in self._slots]

    def all_ready(self) -> bool:
        """Every worker alive and SERVING (what the parent's /readyz answers)."""
        return len(self._slots) == self._count and all(
            process.is_alive() and self._ready[i] for i, process in enumerate(self._slots)
        )

    def request_stop(self) -> None:
        self._stop.set()

    def serve_until_stopped(self) -> int:
        """Serves until `request_stop` (or SIGTERM/SIGINT when installed); returns the exit code."""
        settings = self._settings
        # A missing setting is one error now, not one per worker after each has loaded.
        require(settings, [OpenSearchNeeds, MongoNeeds], vector=True)
        if settings.metrics_port:
            # Before any worker starts: they choose multiprocess metrics on import.
            self._metrics_dir = tempfile.mkdtemp(prefix="engram-metrics-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir
        try:
            self._holder, self.port = reserve_port(settings.grpc_host, settings.grpc_port)
            worker_settings = settings.model_copy(
                update={"grpc_port": self.port, "metrics_port": 0}
            )
            self._slots = [self._start_worker(i, worker_settings) for i in range(self._count)]
            if settings.metrics_port:
                registry = CollectorRegistry()
                multiprocess.MultiProcessCollector(registry, path=self._metrics_dir)  # type: ignore[no-untyped-call]
                self._endpoint = HttpEndpoint(
                    settings.metrics_host, settings.metrics_port, self.all_ready, registry=registry
                )
            log.info(
                "search workers started",
                extra={"addr": f"{settings.grpc_host}:{self.port}", "pids": self.pids},
            )
            return self._supervise(worker_settings)
        finally:
            self._stop_workers()
            if self._endpoint is not None:
                self._endpoint.close()
            if self._holder is not None:
                self._holder.close()
            if self._metrics_dir is not None:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

    def _start_worker(self, index: int, settings: Settings) -> BaseProcess:
        self._served[index] = 0
        self._ready[index] = 0
        process = self._context.Process(
            target=worker_main,
            args=(settings, index, self._served, self._ready),
            name=f"engram-search-{index}",
        )
        process.start()
        return process

    def _supervise(self, settings: Settings) -> int:
        while not self._stop.wait(SUPERVISE_SECONDS):
            for index, process in enumerate(self._slots):
                if process.is_alive():
                    continue
                self._forget_metrics(process)
                if not self._served[index]:
                    log.error(
                        "a search worker exited before it served: stopping",
                        extra={"pid": process.pid, "exitcode": process.exitcode},
                    )
                    return 1
                log.error(
                    "a search worker exited; starting another",
                    extra={"pid": process.pid, "exitcode": process.exitcode},
                )
                self._slots[index] = self._start_worker(index, settings)
        return 0

    def _stop_workers(self) -> None:
        running = [process for process in self._slots if process.is_alive()]
        for process in running:
            process.terminate()  # SIGTERM: the worker drains
        deadline = time.monotonic() + self._settings.shutdown_grace_seconds + EXIT_MARGIN_SECONDS
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning(
                    "a search worker did not stop in time: killed", extra={"pid": process.pid}
                )
                process.kill()
                process.join()
        for process in self._slots:
            self._forget_metrics(process)

    def _forget_metrics(self, process: BaseProcess) -> None:
        if self._metrics_dir is not None and process.pid is not None:
            multiprocess.mark_process_dead(process.pid, self._metrics_dir)  # type: ignore[no-untyped-call]


def serve_search(settings: Settings) -> int:
    """`engram serve search [--workers N]` until SIGTERM or SIGINT; the exit code."""
    if settings.search_workers == 1:
        asyncio.run(run_service("search", settings))
        return 0
    pool = WorkerPool(settings, settings.search_workers)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: pool.request_stop())
    return pool.serve_until_stopped()


def worker_main(settings: Settings, index: int, served: Any, ready: Any) -> None:
    """One worker process (the spawn target)."""
    configure_logging(settings.log_level, settings.log_format)
    configure_tracing("search")
    try:
        asyncio.run(_serve_worker(settings, index, served, ready))
    except (EngramError, OSError) as error:
        message = error.message if isinstance(error, EngramError) else str(error)
        print(f"engram search worker {index}: {message}", file=sys.stderr)
        sys.exit(1)


async def _serve_worker(settings: Settings, index: int, served: Any, ready: Any) -> None:
    keep_large_allocations_mapped()
    stop = asyncio.Event()
    async with search_on_backends(settings, reuse_port=True, interceptors=[CountCalls()]) as server:
        freeze_startup_heap()
        stop_on_signals(stop.set)
        served[index] = 1
        while not stop.is_set():
            ready[index] = int(server.ready())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), READY_SECONDS)
        ready[index] = 0
