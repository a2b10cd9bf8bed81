"""The one domain error hierarchy.

Every error a caller can cause or observe is a subclass of `EngramError`. The runtime maps
the families below to gRPC status codes in a single table (`engram.runtime.errors`);
each subclass names a machine-readable `reason` that travels in `google.rpc.ErrorInfo`.
Messages say what to change, and never echo secrets or another tenant's data.

Errors are bounded: a message echoes a caller's value through `quoted` (at most
`MAX_SHOWN_CHARS` characters), and the base class cuts any message past
`MAX_MESSAGE_BYTES` and any metadata value past `MAX_SHOWN_CHARS`, so no error can outgrow
the 8-16 KiB a gRPC client accepts for its trailers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

# How much of a caller's value an error shows (message, metadata, details).
MAX_SHOWN_CHARS = 200
# A message longer than this (UTF-8) is cut; gRPC percent-encodes it into a trailer.
MAX_MESSAGE_BYTES = 1024
ELLIPSIS = "\u2026"


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters, ending in "…" when it was longer."""
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def quoted(value: str) -> str:
    """A caller's value for a message: clipped, then quoted like `repr`."""
    return repr(clip(value))


def _bounded_message(message: str) -> str:
    encoded = message.encode("utf-8", errors="replace")
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return message
    return encoded[:MAX_MESSAGE_BYTES].decode("utf-8", errors="ignore") + ELLIPSIS


class EngramError(Exception):
    """Base of every domain error."""

    reason: ClassVar[str] = "ENGRAM_ERROR"

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        message = _bounded_message(message)
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {
            key: clip(value) for key, value in (metadata or {}).items()
        }
        # Set on an error rebuilt from a peer's status whose reason names a class this
        # process does not define: that reason, which `info_reason` then reports.
        self.received_reason = ""

    @property
    def info_reason(self) -> str:
        """The `google.rpc.ErrorInfo.reason` this error travels with."""
        return self.received_reason or self.reason


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


class UndecodableRequest(InvalidArgument):
    """The request body is not the message the method takes (corrupt wire format, a
    string field that is not UTF-8)."""

    reason = "UNDECODABLE_REQUEST"


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


class ProtectedFile(PermissionDenied):
    """An identity file (IDENTITY.md, SOUL.md, AGENTS.md, USER.md) named by a workspace write:
    agents cannot change who they are; operators do, through StorageService."""

    reason = "PROTECTED_FILE"

    def __init__(self, message: str, *, rule: str = "protected_file", path: str = "") -> None:
        super().__init__(message, rule=rule)
        if path:
            self.metadata["path"] = path

    @property
    def info_reason(self) -> str:
        return self.reason


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
    """Too much at once; `retry_after_seconds` (if set) travels as google.rpc.RetryInfo."""

    reason = "RATE_LIMITED"

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.retry_after_seconds = retry_after_seconds


# --- UNAVAILABLE ------------------------------------------------------------------------------


class Unavailable(EngramError):
    """A backend could not be reached; the call may be retried."""

    reason = "BACKEND_UNAVAILABLE"


# --- FAILED_PRECONDITION ----------------------------------------------------------------------


class Misconfigured(EngramError):
    """The server's own settings are missing or inconsistent; an operator must fix them."""

    reason = "MISCONFIGURED"


class MissingSetting(Misconfigured):
    """A production process started without a setting it needs."""

    reason = "MISSING_SETTING"
