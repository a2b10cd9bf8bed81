"""Identity: JWT bearer tokens and personal access tokens, resolved to principals.

JWTs are HS256 with ENGRAM_JWT_SECRET, or signed with keys from the JWKS file at
ENGRAM_JWKS_PATH or an identity provider's JWKS endpoint at ENGRAM_JWKS_URL; claims `sub`,
`tenant`, `role`, `platform_admin` (each at a configurable path, see `ClaimMapping`), `exp`
(and `service` for service principals, which may omit `tenant`). Personal access tokens look like
`egm_<id>_<secret>`; only a SHA-256 of the whole token is stored. Unknown, expired,
revoked or malformed tokens are UNAUTHENTICATED, never anything else.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import jwt
from jwt import PyJWK, PyJWKClient

from engram.authz.enforcement import bearer_token
from engram.domain.errors import Unauthenticated, Unavailable, quoted
from engram.domain.principals import Principal, Role
from engram.runtime.ttl_cache import TtlCache

log = logging.getLogger(__name__)

PAT_PREFIX = "egm_"
ROLE_NAMES = {role.name.lower(): role for role in Role}
LEEWAY_SECONDS = 30
NUMERIC_DATE_CLAIMS = ("exp", "nbf", "iat")
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


@dataclass(frozen=True, slots=True)
class ClaimMapping:
    """Where an identity provider puts the principal in its tokens: dotted paths into nested
    claims (`realm_access.roles`); a claim name holding dots itself
    (`https://example.com/tenant`) matches whole. `role_map` maps the provider's role values
    to engram's roles; values not in it are taken by name (viewer ... admin)."""

    subject: str = "sub"
    tenant: str = "tenant"
    role: str = "role"
    platform_admin: str = "platform_admin"
    role_map: Mapping[str, Role] = field(default_factory=dict)


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted `path`, None when absent; whole names win over splitting."""
    if path in claims:
        return claims[path]
    for name, value in claims.items():
        if isinstance(value, Mapping) and path.startswith(f"{name}."):
            found = claim_at(value, path[len(name) + 1 :])
            if found is not None:
                return found
    return None


def role_from_claim(value: Any, role_map: Mapping[str, Role]) -> Role | None:
    """The most powerful role among the claim's values (one string or a list)."""
    values = value if isinstance(value, list) else [value]
    roles = [
        role_map.get(item) or ROLE_NAMES.get(item.lower())
        for item in values
        if isinstance(item, str)
    ]
    known = [role for role in roles if role is not None]
    return max(known) if known else None


@dataclass(frozen=True, slots=True)
class RemoteJwksConfig:
    url: str
    cache_seconds: float = 300.0
    refresh_min_seconds: float = 30.0
    timeout_seconds: float = 5.0


class RemoteJwks:
    """Signing keys from a JWKS endpoint (PyJWKClient), cached for `cache_seconds`; a key id
    not in the cache refetches at most once per `refresh_min_seconds`, so a rotated key is
    picked up at once while tokens with made-up key ids cannot hammer the provider."""

    def __init__(self, config: RemoteJwksConfig) -> None:
        self._config = config
        self._client = PyJWKClient(
            config.url,
            cache_jwk_set=True,
            lifespan=config.cache_seconds,
            timeout=config.timeout_seconds,
        )
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()

    async def keys(self, kid: str) -> Mapping[str, PyJWK]:
        now = time.monotonic()
        stale = now - self._fetched_at >= self._config.cache_seconds
        missing = kid not in self._keys and now - self._fetched_at >= (
            self._config.refresh_min_seconds
        )
        if stale or missing:
            async with self._lock:
                # Another call may have fetched while this one waited.
                if self._fetched_at < now:
                    await self._fetch()
        return self._keys

    async def _fetch(self) -> None:
        self._fetched_at = time.monotonic()
        try:
            signing = await asyncio.wait_for(
                asyncio.to_thread(self._client.get_signing_keys, True),
                self._config.timeout_seconds,
            )
        except (jwt.PyJWKClientError, TimeoutError) as error:
            # Keep the keys already known: a provider's hiccup must not log everyone out.
            log.warning("JWKS fetch from %s failed: %s", self._config.url, error or "timeout")
            if not self._keys:
                raise Unavailable(
                    f"cannot fetch signing keys from {self._config.url}; retry shortly"
                ) from None
            return
        self._keys = {key.key_id or "": key for key in signing}


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

    async def list(
        self, tenant: str, *, user: str = "", after: str = "", limit: int
    ) -> list[StoredToken]:
        """A tenant's tokens (only `user`'s when set) with ids after `after`, by id, at most
        `limit`."""
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
        remote: RemoteJwks | None = None,
        claims: ClaimMapping | None = None,
    ) -> None:
        self._secret = secret
        self._keys: dict[str, PyJWK] = {}
        self._audience = audience
        self._issuer = issuer
        self._remote = remote
        self._claims = claims or ClaimMapping()
        if jwks_path is not None:
            document = json.loads(jwks_path.read_text())
            for entry in document.get("keys", []):
                self._keys[entry.get("kid", "")] = PyJWK.from_dict(entry)

    @property
    def configured(self) -> bool:
        return bool(self._secret or self._keys or self._remote)

    async def verify_async(self, token: str) -> Principal:
        """`verify`, with the JWKS endpoint's keys (fetched off the event loop) when set."""
        if self._remote is None:
            return self.verify(token)
        header = _header(token)
        kid = str(header.get("kid", ""))
        if header.get("alg") == "HS256" or kid in self._keys:
            return self.verify(token)
        return self.verify(token, await self._remote.keys(kid))

    def verify(self, token: str, remote_keys: Mapping[str, PyJWK] | None = None) -> Principal:
        header = _header(token)
        algorithm = str(header.get("alg"))
        key: Any
        keys = {**(remote_keys or {}), **self._keys}
        if algorithm == "HS256" and self._secret:
            key = self._secret
        elif keys and algorithm in ASYMMETRIC_ALGORITHMS:
            kid = header.get("kid", "")
            jwk = (
                keys.get(kid)
                if kid in keys
                else (next(iter(keys.values())) if len(keys) == 1 and not kid else None)
            )
            if jwk is None:
                raise Unauthenticated("bearer token signed with an unknown key id")
            # The key's "alg" (PyJWK infers RS256 for an RSA key without one), never the
            # token's choice: an RSA key does not verify an HS256 or ES256 token.
            if jwk.algorithm_name != algorithm:
                raise Unauthenticated(
                    f"bearer token algorithm {quoted(algorithm)} does not match its key"
                )
            key = jwk.key
        else:
            raise Unauthenticated(f"bearer token algorithm {quoted(algorithm)} is not accepted")
        required = ["exp"] + (["sub"] if self._claims.subject == "sub" else [])
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": required, "verify_aud": self._audience is not None},
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
        return principal_from_claims(claims, self._claims)


def _header(token: str) -> dict[str, Any]:
    try:
        return jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthenticated("malformed bearer token") from None


def principal_from_claims(claims: dict[str, Any], mapping: ClaimMapping | None = None) -> Principal:
    mapping = mapping or ClaimMapping()
    subject = claim_at(claims, mapping.subject)
    service = claims.get("service") is True
    tenant = claim_at(claims, mapping.tenant) or ""
    role = role_from_claim(claim_at(claims, mapping.role), mapping.role_map)
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated(f"bearer token has no subject ({mapping.subject})")
    if not service and (not isinstance(tenant, str) or not tenant):
        raise Unauthenticated(f"bearer token has no tenant claim ({mapping.tenant})")
    if role is None:
        if not service:
            raise Unauthenticated(
                f"bearer token has no valid role claim ({mapping.role}: "
                "viewer, config_editor, member, admin)"
            )
        role = Role.ADMIN
    return Principal(
        subject=subject,
        tenant=tenant if isinstance(tenant, str) else "",
        role=role,
        platform_admin=claim_at(claims, mapping.platform_admin) is True,
        service=service,
    )


class PersonalTokens(Protocol):
    """Where personal access tokens are looked up: the token store (in AuthzService, and in
    `engram dev`'s one process) or AuthzService over gRPC (every other service)."""

    async def principal(self, token: str, digest: str) -> tuple[Principal, float]:
        """The token's principal and the Unix time it stops being valid; Unauthenticated
        for an unknown, revoked or expired token."""
        ...


class StoredPersonalTokens:
    """Personal tokens checked against their hashes in the token store."""

    def __init__(self, store: TokenStore) -> None:
        self._store = store

    async def principal(self, token: str, digest: str) -> tuple[Principal, float]:
        token_id = parse_personal_token(token)
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


class TokenAuthenticator:
    """Resolves `authorization: Bearer <token>` to a principal, with a short-lived cache.

    A revoked personal token stops working within `cache_seconds`. Personal tokens come
    from `store`, or from `personal` when given (AuthzService over gRPC).
    """

    def __init__(
        self,
        verifier: JwtVerifier,
        store: TokenStore | None,
        *,
        cache_seconds: float = 30.0,
        personal: PersonalTokens | None = None,
    ) -> None:
        self._verifier = verifier
        self._personal_tokens = personal or (
            StoredPersonalTokens(store) if store is not None else None
        )
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
            if self._personal_tokens is None:
                raise Unauthenticated("personal access tokens are not enabled on this server")
            principal, expires = await self._personal_tokens.principal(token, digest)
        elif self._verifier.configured:
            principal = await self._verifier.verify_async(token)
            expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])
        else:
            raise Unauthenticated("this server accepts only personal access tokens (egm_...)")
        self._cache.put(digest, (principal, expires))
        return principal

    def forget(self, token_id: str) -> None:
        """Drops cached principals after a revocation made in this process."""
        self._cache.clear()
