"""Per-call context: request id and principal, carried in ContextVars."""

from __future__ import annotations

from contextvars import ContextVar

from engram.domain.errors import Unauthenticated
from engram.domain.principals import Principal

request_id_var: ContextVar[str] = ContextVar("engram_request_id", default="-")
principal_var: ContextVar[Principal | None] = ContextVar("engram_principal", default=None)


def current_principal() -> Principal:
    """The authenticated caller of the current RPC (set by the interceptor)."""
    principal = principal_var.get()
    if principal is None:
        raise Unauthenticated("this call needs a bearer token in the authorization metadata")
    return principal
