"""The one table mapping domain errors to gRPC status codes, with rich error details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engram.domain.errors import (
    Conflict,
    EngramError,
    EtagMismatch,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    Unauthenticated,
    Unavailable,
)

ERROR_DOMAIN = "engram.dev"

# First match wins (most specific family first).
STATUS_BY_ERROR: tuple[tuple[type[EngramError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Conflict, grpc.StatusCode.ABORTED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (RateLimited, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)


def status_code_for(error: EngramError) -> grpc.StatusCode:
    for family, code in STATUS_BY_ERROR:
        if isinstance(error, family):
            return code
    return grpc.StatusCode.INTERNAL


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
                            field=error.field, description=error.message
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
                            subject=f"{error.limit}:{error.subject}", description=error.message
                        )
                    ]
                )
            )
        )
    elif isinstance(error, EtagMismatch):
        details.append(
            _pack(
                error_details_pb2.PreconditionFailure(
                    violations=[
                        error_details_pb2.PreconditionFailure.Violation(
                            type="ETAG",
                            subject=error.subject,
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
