"""grpc.health.v1 Check on every address given, until each is SERVING or the deadline.

Run by the chart's `helm test` pod with the engram image's Python (grpcio and
grpcio-health-checking are engram dependencies), and by deploy/local/install-check.sh
against `engram dev`:

    python health_check.py [--timeout SECONDS] [--ca CA --cert CRT --key KEY] HOST:PORT ...

With --ca the channels speak TLS trusting that CA (with --cert and --key: mTLS).

Exits 0 when every address answered SERVING for the overall service "", else 1 with one
line per address that did not.
"""

from __future__ import annotations

import argparse
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def status_of(address: str, credentials: grpc.ChannelCredentials | None = None) -> str:
    channel = (
        grpc.secure_channel(address, credentials)
        if credentials is not None
        else grpc.insecure_channel(address)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=3)
        except grpc.RpcError as error:
            return f"{error.code().name}: {error.details()}"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--ca", help="CA certificate (PEM): check over TLS")
    parser.add_argument("--cert", help="client certificate (PEM) for mTLS")
    parser.add_argument("--key", help="client key (PEM) for mTLS")
    parser.add_argument("addresses", nargs="+")
    args = parser.parse_args()
    credentials = None
    if args.ca:
        credentials = grpc.ssl_channel_credentials(read(args.ca), read(args.key), read(args.cert))
    deadline = time.monotonic() + args.timeout
    pending = {address: "not checked" for address in args.addresses}
    while pending:
        for address in list(pending):
            pending[address] = status_of(address, credentials)
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
