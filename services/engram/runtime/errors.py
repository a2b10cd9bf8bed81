"""Errors across the wire, both ways: the one table mapping domain errors to gRPC status
codes, the rich details they travel with, and the way back for every internal client.

A servicer raises a domain error; the server interceptor turns it into a status with
`to_grpc_status`. A client of another engram service turns a failed call back into the
same domain error with `from_rpc_error` (or the `remote_errors` block), so a denial stays
a denial and a quota stays a quota on the far side of any hop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engram.domain.errors import (
    Conflict,
    EngramError,
    EtagMismatch,
    InvalidArgument,
    Misconfigured,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    Unauthenticated,
    Unavailable,
    clip,
)

ERROR_DOMAIN = "engram.dev"

# Every EngramError is a subclass of exactly one of these families.
STATUS_BY_ERROR: tuple[tuple[type[EngramError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Conflict, grpc.StatusCode.ABORTED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (RateLimited, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Misconfigured, grpc.StatusCode.FAILED_PRECONDITION),
)

# What a received status becomes when its reason names no class this process knows.
FAMILY_BY_CODE: dict[grpc.StatusCode, type[EngramError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.FAILED_PRECONDITION: Misconfigured,
}

# Codes a peer's gRPC stack (not engram) may answer with that still mean the caller's
# mistake; any other code without engram's ErrorInfo means the peer or the link failed.
_TRANSPORT_CODES_KEPT = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


def code_for_class(cls: type[EngramError]) -> grpc.StatusCode:
    """The status code of an error class (INTERNAL if it is in no family: a bug)."""
    for family, code in STATUS_BY_ERROR:
        if issubclass(cls, family):
            return code
    return grpc.StatusCode.INTERNAL


def status_code_for(error: EngramError) -> grpc.StatusCode:
    return code_for_class(type(error))


# --- domain error -> status ------------------------------------------------------------------


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def to_rpc_status(error: EngramError) -> status_pb2.Status:
    """The google.rpc.Status for `error`: ErrorInfo plus the standard detail that fits."""
    code = status_code_for(error)
    details = [
        _pack(
            error_details_pb2.ErrorInfo(
                reason=error.info_reason, domain=ERROR_DOMAIN, metadata=error.metadata
            )
        )
    ]
    if isinstance(error, InvalidArgument) and error.field:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=clip(error.field), description=error.message
                        )
                    ]
                )
            )
        )
    elif isinstance(error, QuotaExceeded):
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=f"{error.limit}:{clip(error.subject)}",
                            description=error.message,
                        )
                    ]
                )
            )
        )
    elif isinstance(error, RateLimited) and error.retry_after_seconds is not None:
        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=error.retry_after_seconds))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    elif isinstance(error, EtagMismatch):
        details.append(
            _pack(
                error_details_pb2.PreconditionFailure(
                    violations=[
                        error_details_pb2.PreconditionFailure.Violation(
                            type="ETAG",
                            subject=clip(error.subject),
                            description=f"current sha256 is {error.current_sha256 or '(absent)'}",
                        )
                    ]
                )
            )
        )
    return status_pb2.Status(
        code=getattr(code_pb2, code.name), message=error.message, details=details
    )


def to_grpc_status(error: EngramError) -> grpc.Status:
    status: grpc.Status = rpc_status.to_status(to_rpc_status(error))
    return status


# --- status -> domain error ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReceivedStatus:
    """What a failed call carried: its code, message and engram's details, if any."""

    code: grpc.StatusCode
    message: str
    # Empty when the status carries no engram ErrorInfo (the peer's gRPC stack answered).
    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    # BadRequest's field, QuotaFailure's or PreconditionFailure's subject.
    violated_field: str = ""
    subject: str = ""


def received_status(error: grpc.RpcError) -> ReceivedStatus:
    """The code, message and details of a failed call (sync or asyncio)."""
    call: Any = error
    code = call.code()
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    message = call.details() or ""
    try:
        status = rpc_status.from_call(call)
    except ValueError:  # details that contradict the code or message: ignore them
        status = None
    if status is None:
        return ReceivedStatus(code, message)
    reason, metadata, field_name, subject = "", {}, "", ""
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        bad = error_details_pb2.BadRequest()
        quota = error_details_pb2.QuotaFailure()
        precondition = error_details_pb2.PreconditionFailure()
        if detail.Unpack(info):
            if info.domain == ERROR_DOMAIN:
                reason, metadata = info.reason, dict(info.metadata)
        elif detail.Unpack(bad) and bad.field_violations:
            field_name = bad.field_violations[0].field
        elif detail.Unpack(quota) and quota.violations:
            subject = quota.violations[0].subject
        elif detail.Unpack(precondition) and precondition.violations:
            subject = precondition.violations[0].subject
    return ReceivedStatus(code, message, reason, metadata, field_name, subject)


def error_classes() -> list[type[EngramError]]:
    """Every EngramError subclass defined in this process so far (the base excluded)."""
    found: list[type[EngramError]] = []
    pending = list(EngramError.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return found


def _class_for(received: ReceivedStatus) -> type[EngramError]:
    # The domain's errors that travel but live beside their rules (the change feed's, the
    # dreaming model's): known to a client process that never imported those modules.
    import engram.domain.changes
    import engram.domain.dreaming  # noqa: F401

    for cls in error_classes():
        if cls.reason == received.reason and code_for_class(cls) == received.code:
            return cls
    return FAMILY_BY_CODE[received.code]


def _number(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _rebuild(cls: type[EngramError], received: ReceivedStatus) -> EngramError:
    message, metadata = received.message, received.metadata
    if issubclass(cls, PermissionDenied):
        rule = metadata.get("rule") or (received.reason or "permission_denied").lower()
        return cls(message, rule=rule)
    if issubclass(cls, EtagMismatch):
        return cls(
            message, current_sha256=metadata.get("current_sha256", ""), subject=received.subject
        )
    if issubclass(cls, QuotaExceeded):
        limit, _, subject = received.subject.partition(":")
        return cls(
            message,
            limit=metadata.get("limit", limit),
            subject=subject,
            limit_bytes=_number(metadata.get("limit_bytes")),
            used_bytes=_number(metadata.get("used_bytes")),
            requested_bytes=_number(metadata.get("requested_bytes")),
        )
    if issubclass(cls, InvalidArgument):
        return cls(message, field=received.violated_field, metadata=metadata)
    return cls(message, metadata=metadata)


def from_received(received: ReceivedStatus, peer: str) -> EngramError:
    """The domain error a received status stands for. A status engram did not shape (no
    ErrorInfo) that is not plainly the caller's mistake - a timeout, a dropped link, a
    peer's INTERNAL - becomes Unavailable naming `peer`, for the caller to retry."""
    if received.code in FAMILY_BY_CODE and (
        received.reason or received.code in _TRANSPORT_CODES_KEPT
    ):
        rebuilt = _rebuild(_class_for(received), received)
        if received.reason and rebuilt.info_reason != received.reason:
            # A reason of a class this process does not define (a server-side module's):
            # the family's class, still telling the reason the peer sent.
            rebuilt.received_reason = received.reason
        return rebuilt
    detail = f": {received.message}" if received.message else ""
    return Unavailable(
        f"{peer} failed: {received.code.name}{detail}",
        metadata={"peer": peer, "code": received.code.name},
    )


def from_rpc_error(error: grpc.RpcError, peer: str) -> EngramError:
    """The domain error a failed call to `peer` (e.g. "QuotaService.Charge") stands for."""
    return from_received(received_status(error), peer)


@contextlib.contextmanager
def remote_errors(peer: str) -> Iterator[None]:
    """Re-raises a failed call inside the block as its domain error."""
    try:
        yield
    except grpc.RpcError as error:
        raise from_rpc_error(error, peer) from None
