"""grpc.health.v1 Check on every address given, until each is SERVING or the deadline.

Run by the chart's `helm test` pod with the engram image's Python (grpcio and
grpcio-health-checking are engram dependencies), and by deploy/local/install-check.sh
against `engram dev`:

    python health_check.py [--timeout SECONDS] HOST:PORT [HOST:PORT ...]

Exits 0 when every address answered SERVING for the overall service "", else 1 with one
line per address that did not.
"""

from __future__ import annotations

import argparse
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def status_of(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=3)
        except grpc.RpcError as error:
            return f"{error.code().name}: {error.details()}"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("addresses", nargs="+")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    pending = {address: "not checked" for address in args.addresses}
    while pending:
        for address in list(pending):
            pending[address] = status_of(address)
            if pending[address] == "SERVING":
                print(f"{address}: SERVING", flush=True)
                del pending[address]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1)
    for address, status in pending.items():
        print(f"{address}: {status}", file=sys.stderr)
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main())
