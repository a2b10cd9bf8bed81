"""Small helpers for calling engram over gRPC in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Iterator
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.v1 import space_pb2, storage_pb2, storage_pb2_grpc


def space(
    name: str = "notes", visibility: int = space_pb2.VISIBILITY_PRIVATE, **qualifiers: str
) -> space_pb2.SpaceRef:
    return space_pb2.SpaceRef(visibility=visibility, name=name, **qualifiers)  # type: ignore[arg-type]


def write_request(
    path: str, content: str, *, ref: space_pb2.SpaceRef | None = None, **fields: Any
) -> storage_pb2.WriteDocumentRequest:
    return storage_pb2.WriteDocumentRequest(
        space=ref or space(), path=path, content=content, **fields
    )


class CallFailure:
    """A failed call's code, message and rich details."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        self.code = error.code()
        self.message = error.details() or ""
        self.reason = ""
        self.metadata: dict[str, str] = {}
        self.details: list[Any] = []
        status = rpc_status.from_call(error)
        if status is not None:
            for detail in status.details:
                for kind in (
                    error_details_pb2.ErrorInfo,
                    error_details_pb2.BadRequest,
                    error_details_pb2.QuotaFailure,
                    error_details_pb2.PreconditionFailure,
                    error_details_pb2.RetryInfo,
                ):
                    message = kind()
                    if detail.Unpack(message):
                        self.details.append(message)
                        if isinstance(message, error_details_pb2.ErrorInfo):
                            self.reason = message.reason
                            self.metadata = dict(message.metadata)

    def detail(self, kind: type[Any]) -> Any:
        return next(d for d in self.details if isinstance(d, kind))


async def fails(call: Awaitable[Any], code: grpc.StatusCode, reason: str = "") -> CallFailure:
    """Awaits `call`, asserting it fails with `code` (and ErrorInfo `reason`), never INTERNAL,
    never with a traceback in the message."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        failure = CallFailure(error)
    else:
        raise AssertionError(f"expected {code.name}, the call succeeded")
    assert failure.code == code, f"expected {code.name}, got {failure.code.name}: {failure.message}"
    assert "Traceback" not in failure.message
    assert failure.reason, "every error carries google.rpc.ErrorInfo with a reason"
    if reason:
        assert failure.reason == reason, failure.reason
    return failure


async def import_sync(
    port: int,
    ref: space_pb2.SpaceRef,
    pieces: Iterable[bytes],
    metadata: tuple[tuple[str, str], ...],
    strategy: int = storage_pb2.IMPORT_STRATEGY_OVERWRITE,
) -> storage_pb2.ImportSpaceResponse | CallFailure:
    """ImportSpace through the sync client in a thread. The asyncio client may report a
    server that ends a client stream early (a refusal mid-upload) as INTERNAL "Internal error
    from Core" instead of the server's status (grpc/grpc#36066); the sync client does not."""

    def messages() -> Iterator[storage_pb2.ImportSpaceRequest]:
        yield storage_pb2.ImportSpaceRequest(space=ref, strategy=strategy)  # type: ignore[arg-type]
        for piece in pieces:
            yield storage_pb2.ImportSpaceRequest(data=piece)

    def call() -> storage_pb2.ImportSpaceResponse | CallFailure:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)
            try:
                response: storage_pb2.ImportSpaceResponse = stub.ImportSpace(
                    messages(), metadata=metadata, timeout=120
                )
            except grpc.RpcError as error:
                return CallFailure(error)  # type: ignore[arg-type]
            return response

    return await asyncio.to_thread(call)
