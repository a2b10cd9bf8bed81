"""Personal access tokens resolved by AuthzService, the one service that owns them.

Every other service (storage, quota, indexer, search, workspace, maintenance) asks
AuthzService.Authenticate instead of reading the token collection, so only AuthzService
needs credentials to it. The answer is cached by the caller's `TokenAuthenticator` for
ENGRAM_AUTH_CACHE_SECONDS (30 s by default): a token costs one round trip per process per
30 s, and a revocation reaches every service within those 30 s. A token that expires
sooner than that is cached only until its own expiry is checked again by AuthzService at the
next lookup, so it outlives its expiry by at most the same 30 s.
"""

from __future__ import annotations

import time

from engram.authz.tokens import parse_personal_token
from engram.client.aio import EngramClient
from engram.domain.errors import Unauthenticated
from engram.domain.principals import Principal, Role


class AuthzPersonalTokens:
    """`PersonalTokens` over AuthzService.Authenticate (which needs no caller credentials:
    the token to check is the request)."""

    def __init__(self, client: EngramClient, *, cache_seconds: float) -> None:
        self._client = client
        self._cache_seconds = cache_seconds

    async def principal(self, token: str, digest: str) -> tuple[Principal, float]:
        parse_personal_token(token)  # a malformed token costs no round trip
        found = await self._client.authenticate(token)
        if not found.role:
            raise Unauthenticated("AuthzService returned no role for the token")
        principal = Principal(
            subject=found.subject,
            tenant=found.tenant,
            role=Role[found.role.upper()],
            platform_admin=found.platform_admin,
            service=found.service,
            token_id=found.token_id,
        )
        return principal, time.time() + self._cache_seconds
