"""The enforcement library: one `Authorizer` every service calls before touching a space.

Decisions come from the pure rules in `engram.domain.policy`; a short-lived cache keeps
repeated decisions (an agent hammering one space) off the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter

from engram.domain.errors import PermissionDenied, Unauthenticated
from engram.domain.policy import TENANT_MISMATCH, Decision, Target, decide, permits
from engram.domain.ports import AuthorizedSpace
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.runtime.ttl_cache import TtlCache

DECISIONS = Counter(
    "engram_authz_decisions_total",
    "Authorization decisions, by action and outcome.",
    ("action", "outcome"),
)


class PolicyAuthorizer:
    """Authorizes with the domain policy; raises PermissionDenied with the rule's reason."""

    def __init__(self, *, cache_seconds: float = 5.0, cache_size: int = 4096) -> None:
        self._cache: TtlCache[tuple[Principal, Action, SpaceRef], Decision] = TtlCache(
            ttl=cache_seconds, size=cache_size
        )

    def decide(self, principal: Principal, action: Action, space: SpaceRef) -> Decision:
        key = (principal, action, space)
        decision = self._cache.get(key)
        if decision is None:
            decision = decide(principal, action, space)
            self._cache.put(key, decision)
        DECISIONS.labels(action.value, "allowed" if decision.allowed else decision.rule).inc()
        return decision

    async def authorize(
        self, principal: Principal, action: Action, space: SpaceRef
    ) -> AuthorizedSpace:
        decision = self.decide(principal, action, space)
        granted = decision.require()
        if not decision.as_named:
            check_space_tenant(principal, granted)
        attributed = principal.tenant if granted.is_global and action.mutates else ""
        return AuthorizedSpace(
            space=granted, audit_action=decision.audit_action, attributed_tenant=attributed
        )

    async def permits(self, principal: Principal, action: Action, target: Target) -> bool:
        allowed = permits(principal, action, target)
        DECISIONS.labels(action.value, "allowed" if allowed else "refused").inc()
        return allowed


def check_space_tenant(principal: Principal, space: SpaceRef) -> None:
    """Defence in depth: every query is keyed by the space id, so the id about to be queried
    must carry the caller's own tenant (global spaces and services aside), whatever the
    policy decided. A failure here is a bug in stamping or id construction, refused."""
    if principal.service or space.is_global:
        return
    id_tenant = space.id.split(":")[2]
    if space.tenant != principal.tenant or id_tenant != principal.tenant:
        DECISIONS.labels("any", TENANT_MISMATCH).inc()
        raise PermissionDenied(
            "the space resolved to another tenant's data; refused", rule=TENANT_MISMATCH
        )


class FixedPrincipalAuthenticator:
    """`engram dev` without --auth: every caller is the one implicit local admin."""

    def __init__(self, principal: Principal) -> None:
        self._principal = principal

    async def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        return self._principal


def bearer_token(metadata: Sequence[tuple[str, str | bytes]]) -> str:
    """The token from `authorization: Bearer <token>`; raises Unauthenticated if missing."""
    for key, value in metadata:
        if key == "authorization":
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated('authorization metadata must be "Bearer <token>"')
            return token.strip()
    raise Unauthenticated(
        "this call needs a bearer token: send metadata authorization: Bearer <token>"
    )
