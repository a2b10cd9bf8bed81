"""Failed calls become engram's domain errors; nothing from grpc escapes the client."""

from __future__ import annotations

from typing import Any

import grpc

from engram.domain.errors import EngramError, RateLimited, Unavailable

# engram.runtime.errors (and the google.rpc details it decodes) are imported when a call
# fails, not with the client: a CLI command that succeeds never pays for them.


def domain_error(error: grpc.RpcError, peer: str) -> EngramError:
    """The domain error a failed call to `peer` ("WorkspaceService.MemoryWrite") stands for;
    a RateLimited one carries the RetryInfo delay as `retry_after_seconds`."""
    from engram.runtime.errors import from_rpc_error

    rebuilt = from_rpc_error(error, peer)
    if isinstance(rebuilt, RateLimited) and rebuilt.retry_after_seconds is None:
        rebuilt.retry_after_seconds = _retry_delay(error)
    return rebuilt


def _retry_delay(error: grpc.RpcError) -> float | None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    call: Any = error
    try:
        status = rpc_status.from_call(call)
    except ValueError:
        return None
    for detail in status.details if status is not None else ():
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return float(info.retry_delay.ToTimedelta().total_seconds())
    return None


def explain(error: EngramError) -> str:
    """`CODE: message [REASON]`, the one line a user (or a model) is shown for an error."""
    from engram.runtime.errors import status_code_for

    return f"{status_code_for(error).name}: {error.message} [{error.info_reason}]"


def status_name(error: EngramError) -> str:
    """The gRPC status code a failed call ended with, by name ("NOT_FOUND",
    "DEADLINE_EXCEEDED" ...), as a caller that counts failures by code reports them: for a
    failure engram did not shape (a deadline passed, a dropped link, the peer's own gRPC
    refusing a message) the code received, which `Unavailable` keeps in its metadata;
    otherwise the code of the error's class."""
    from engram.runtime.errors import status_code_for

    received = error.metadata.get("code", "") if isinstance(error, Unavailable) else ""
    if received in grpc.StatusCode.__members__:
        return received
    return status_code_for(error).name
