"""Identity: JWT bearer tokens and personal access tokens, resolved to principals.

JWTs are HS256 with ENGRAM_JWT_SECRET or RS256 with keys from the JWKS file at
ENGRAM_JWKS_PATH; claims `sub`, `tenant`, `role`, `platform_admin`, `exp` (and `service`
for service principals, which may omit `tenant`). Personal access tokens look like
`egm_<id>_<secret>`; only a SHA-256 of the whole token is stored. Unknown, expired,
revoked or malformed tokens are UNAUTHENTICATED, never anything else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import jwt
from jwt import PyJWK

from engram.authz.enforcement import bearer_token
from engram.domain.errors import Unauthenticated, quoted
from engram.domain.principals import Principal, Role
from engram.runtime.ttl_cache import TtlCache

PAT_PREFIX = "egm_"
ROLE_NAMES = {role.name.lower(): role for role in Role}
LEEWAY_SECONDS = 30
NUMERIC_DATE_CLAIMS = ("exp", "nbf", "iat")


@dataclass(frozen=True, slots=True)
class StoredToken:
    token_id: str
    token_hash: str
    tenant: str
    user: str
    role: Role
    expires_at: datetime
    created_at: datetime
    created_by: str
    description: str = ""
    revoked_at: datetime | None = None


class TokenStore(Protocol):
    async def insert(self, token: StoredToken) -> None: ...

    async def get(self, token_id: str) -> StoredToken | None: ...

    async def revoke(self, token_id: str, at: datetime) -> bool:
        """Marks the token revoked; False if there is no such token."""
        ...


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_personal_token() -> tuple[str, str]:
    """(token, token_id): the token is shown once; store only its hash."""
    token_id = secrets.token_hex(8)
    return f"{PAT_PREFIX}{token_id}_{secrets.token_urlsafe(32)}", token_id


def parse_personal_token(token: str) -> str:
    """The token id inside a personal access token; Unauthenticated when malformed."""
    body = token[len(PAT_PREFIX) :]
    token_id, sep, secret = body.partition("_")
    if not sep or len(token_id) != 16 or not secret:
        raise Unauthenticated("malformed personal access token")
    return token_id


class JwtVerifier:
    """Verifies JWTs with exactly the configured algorithms (never `none`)."""

    def __init__(
        self,
        *,
        secret: str | None,
        jwks_path: Path | None,
        audience: str | None = None,
        issuer: str | None = None,
    ) -> None:
        self._secret = secret
        self._keys: dict[str, Any] = {}
        self._audience = audience
        self._issuer = issuer
        if jwks_path is not None:
            document = json.loads(jwks_path.read_text())
            for entry in document.get("keys", []):
                key = PyJWK.from_dict(entry)
                self._keys[entry.get("kid", "")] = key.key

    @property
    def configured(self) -> bool:
        return bool(self._secret or self._keys)

    def verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("malformed bearer token") from None
        algorithm = header.get("alg")
        key: Any
        if algorithm == "HS256" and self._secret:
            key = self._secret
        elif algorithm == "RS256" and self._keys:
            kid = header.get("kid", "")
            key = (
                self._keys.get(kid)
                if kid in self._keys
                else (next(iter(self._keys.values())) if len(self._keys) == 1 and not kid else None)
            )
            if key is None:
                raise Unauthenticated("bearer token signed with an unknown key id")
        else:
            raise Unauthenticated(
                f"bearer token algorithm {quoted(str(algorithm))} is not accepted"
            )
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "sub"], "verify_aud": self._audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("bearer token has expired") from None
        except jwt.PyJWTError as error:
            raise Unauthenticated(f"bearer token rejected: {error}") from None
        # PyJWT also accepts a numeric string ("exp": "1767225600"); RFC 7519 says NumericDate
        # is a JSON number, and a string there is a sign of a hand-made token: refused.
        for claim in NUMERIC_DATE_CLAIMS:
            value = claims.get(claim)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise Unauthenticated(f"bearer token claim {claim!r} must be a number")
        return principal_from_claims(claims)


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    subject = claims.get("sub")
    service = claims.get("service") is True
    tenant = claims.get("tenant", "")
    role = ROLE_NAMES.get(str(claims.get("role", "")).lower())
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated("bearer token has no subject (sub)")
    if not service and (not isinstance(tenant, str) or not tenant):
        raise Unauthenticated("bearer token has no tenant claim")
    if role is None:
        if not service:
            raise Unauthenticated(
                "bearer token has no valid role claim (viewer, config_editor, member, admin)"
            )
        role = Role.ADMIN
    return Principal(
        subject=subject,
        tenant=tenant if isinstance(tenant, str) else "",
        role=role,
        platform_admin=claims.get("platform_admin") is True,
        service=service,
    )


class TokenAuthenticator:
    """Resolves `authorization: Bearer <token>` to a principal, with a short-lived cache.

    A revoked personal token stops working within `cache_seconds`.
    """

    def __init__(
        self, verifier: JwtVerifier, store: TokenStore | None, *, cache_seconds: float = 30.0
    ) -> None:
        self._verifier = verifier
        self._store = store
        self._cache: TtlCache[str, tuple[Principal, float]] = TtlCache(
            ttl=cache_seconds, size=10_000
        )

    async def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        return await self.resolve(bearer_token(metadata))

    async def resolve(self, token: str) -> Principal:
        digest = hash_token(token)
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > time.time():
            return cached[0]
        if token.startswith(PAT_PREFIX):
            principal, expires = await self._personal(token, digest)
        elif self._verifier.configured:
            principal = self._verifier.verify(token)
            expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])
        else:
            raise Unauthenticated("this server accepts only personal access tokens (egm_...)")
        self._cache.put(digest, (principal, expires))
        return principal

    async def _personal(self, token: str, digest: str) -> tuple[Principal, float]:
        token_id = parse_personal_token(token)
        if self._store is None:
            raise Unauthenticated("personal access tokens are not enabled on this server")
        stored = await self._store.get(token_id)
        if stored is None or not hmac.compare_digest(stored.token_hash, digest):
            raise Unauthenticated("unknown personal access token")
        if stored.revoked_at is not None:
            raise Unauthenticated("personal access token has been revoked")
        if stored.expires_at <= datetime.now(UTC):
            raise Unauthenticated("personal access token has expired")
        principal = Principal(
            subject=stored.user, tenant=stored.tenant, role=stored.role, token_id=stored.token_id
        )
        return principal, stored.expires_at.timestamp()

    def forget(self, token_id: str) -> None:
        """Drops cached principals after a revocation made in this process."""
        self._cache.clear()
