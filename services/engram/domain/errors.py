"""The one domain error hierarchy.

Every error a caller can cause or observe is a subclass of `EngramError`. The runtime maps
the six families below to gRPC status codes in a single table (`engram.runtime.errors`);
each subclass names a machine-readable `reason` that travels in `google.rpc.ErrorInfo`.
Messages say what to change, and never echo secrets or another tenant's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class EngramError(Exception):
    """Base of every domain error."""

    reason: ClassVar[str] = "ENGRAM_ERROR"

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def info_reason(self) -> str:
        """The `google.rpc.ErrorInfo.reason` this error travels with."""
        return self.reason


# --- INVALID_ARGUMENT -------------------------------------------------------------------------


class InvalidArgument(EngramError):
    """The request is malformed; `field` names the offending request field when known."""

    reason = "INVALID_ARGUMENT"

    def __init__(
        self, message: str, *, field: str = "", metadata: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.field = field


class InvalidSpaceRef(InvalidArgument):
    reason = "INVALID_SPACE_REF"


class InvalidPath(InvalidArgument):
    reason = "INVALID_PATH"


class InvalidContent(InvalidArgument):
    reason = "INVALID_CONTENT"


class ContentTooLarge(InvalidArgument):
    reason = "CONTENT_TOO_LARGE"


class SecretInContent(InvalidArgument):
    reason = "SECRET_IN_CONTENT"


class InvalidPageToken(InvalidArgument):
    reason = "INVALID_PAGE_TOKEN"


class InvalidArchive(InvalidArgument):
    reason = "INVALID_ARCHIVE"


# --- NOT_FOUND --------------------------------------------------------------------------------


class NotFound(EngramError):
    reason = "NOT_FOUND"


class DocumentNotFound(NotFound):
    reason = "DOCUMENT_NOT_FOUND"


class VersionNotFound(NotFound):
    reason = "VERSION_NOT_FOUND"


# --- ABORTED ----------------------------------------------------------------------------------


class Conflict(EngramError):
    """A concurrent change won; the caller should re-read and retry."""

    reason = "CONFLICT"


class EtagMismatch(Conflict):
    """`expected_sha256` (or `create_only`) did not hold; carries the current sha256."""

    reason = "ETAG_MISMATCH"

    def __init__(self, message: str, *, current_sha256: str, subject: str) -> None:
        super().__init__(message, metadata={"current_sha256": current_sha256})
        self.current_sha256 = current_sha256
        self.subject = subject


class WriteContention(Conflict):
    reason = "WRITE_CONTENTION"


# --- PERMISSION_DENIED / UNAUTHENTICATED ------------------------------------------------------


class PermissionDenied(EngramError):
    """The principal may not do this; `reason` is the lower-case rule name in metadata."""

    reason = "PERMISSION_DENIED"

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message, metadata={"rule": rule})
        self.rule = rule

    @property
    def info_reason(self) -> str:
        return self.rule.upper()


class Unauthenticated(EngramError):
    reason = "UNAUTHENTICATED"


# --- RESOURCE_EXHAUSTED -----------------------------------------------------------------------


class QuotaExceeded(EngramError):
    """A write would take a counter past its limit."""

    reason = "QUOTA_EXCEEDED"

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        subject: str,
        limit_bytes: int,
        used_bytes: int,
        requested_bytes: int,
    ) -> None:
        super().__init__(
            message,
            metadata={
                "limit": limit,
                "limit_bytes": str(limit_bytes),
                "used_bytes": str(used_bytes),
                "requested_bytes": str(requested_bytes),
            },
        )
        self.limit = limit
        self.subject = subject
        self.limit_bytes = limit_bytes
        self.used_bytes = used_bytes
        self.requested_bytes = requested_bytes


class RateLimited(EngramError):
    reason = "RATE_LIMITED"


# --- UNAVAILABLE ------------------------------------------------------------------------------


class Unavailable(EngramError):
    """A backend could not be reached; the call may be retried."""

    reason = "BACKEND_UNAVAILABLE"
