"""Identity: JWT verification and personal access tokens; every bad token is refused."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from engram.authz.enforcement import bearer_token
from engram.authz.tokens import (
    JwtVerifier,
    StoredToken,
    TokenAuthenticator,
    hash_token,
    new_personal_token,
    parse_personal_token,
)
from engram.domain.errors import Unauthenticated
from engram.domain.principals import Role
from tests.support.tokens import TEST_JWT_SECRET, mint

pytestmark = pytest.mark.unit

VERIFIER = JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None)


def test_a_valid_hs256_token_gives_its_principal() -> None:
    principal = VERIFIER.verify(mint("ann", "acme", "member", platform_admin=True))
    assert (principal.subject, principal.tenant, principal.role) == ("ann", "acme", Role.MEMBER)
    assert principal.platform_admin and not principal.service


def test_service_tokens_need_no_tenant() -> None:
    principal = VERIFIER.verify(
        jwt.encode(
            {"sub": "indexer", "service": True, "exp": int(time.time()) + 60},
            TEST_JWT_SECRET,
            algorithm="HS256",
        )
    )
    assert principal.service and principal.tenant == ""


def _none_token() -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {"sub": "x", "tenant": "acme", "role": "admin", "exp": int(time.time()) + 60}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


@pytest.mark.parametrize(
    ("token", "fragment"),
    [
        (mint(ttl=-120), "expired"),
        (mint(secret="another-secret-" + "fedcba9876543210" * 4), "rejected"),
        (_none_token(), "not accepted"),
        ("not.a.jwt", "malformed"),
        ("garbage", "malformed"),
        (mint(tenant=None), "tenant"),  # type: ignore[arg-type]
        (mint(role="owner"), "role"),
        (mint(role=None), "role"),  # type: ignore[arg-type]
        (
            jwt.encode(
                {"tenant": "acme", "role": "member", "exp": int(time.time()) + 60},
                TEST_JWT_SECRET,
                algorithm="HS256",
            ),
            "sub",
        ),
        (
            jwt.encode(
                {"sub": "ann", "tenant": "acme", "role": "member"},
                TEST_JWT_SECRET,
                algorithm="HS256",
            ),
            "exp",
        ),
        (
            jwt.encode(
                {"sub": "ann", "tenant": "acme", "role": "member", "exp": int(time.time()) + 60},
                TEST_JWT_SECRET,
                algorithm="HS512",
            ),
            "not accepted",
        ),
    ],
)
def test_bad_tokens_are_unauthenticated(token: str, fragment: str) -> None:
    with pytest.raises(Unauthenticated) as caught:
        VERIFIER.verify(token)
    assert fragment in caught.value.message


def test_rs256_with_a_jwks_file(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    public["kid"] = "k1"
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [public]}))
    verifier = JwtVerifier(secret=None, jwks_path=tmp_path / "jwks.json")
    claims = {"sub": "ann", "tenant": "acme", "role": "admin", "exp": int(time.time()) + 60}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    assert verifier.verify(token).role == Role.ADMIN
    with pytest.raises(Unauthenticated, match="unknown key id"):
        verifier.verify(jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k2"}))
    with pytest.raises(Unauthenticated, match="not accepted"):
        verifier.verify(mint())  # an HS256 token where only RS256 keys are configured
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthenticated, match="rejected"):
        verifier.verify(jwt.encode(claims, other, algorithm="RS256", headers={"kid": "k1"}))


def test_personal_tokens_are_stored_only_as_hashes() -> None:
    token, token_id = new_personal_token()
    assert token.startswith(f"egm_{token_id}_") and len(token) > 50
    assert parse_personal_token(token) == token_id
    assert hash_token(token) != token and len(hash_token(token)) == 64
    for bad in ("egm_", "egm_short_x", "egm_0123456789abcdef", "egm_0123456789abcdef_"):
        with pytest.raises(Unauthenticated, match="malformed"):
            parse_personal_token(bad)


class MemoryTokens:
    """An in-memory TokenStore for unit tests of the authenticator's own logic."""

    def __init__(self) -> None:
        self.rows: dict[str, StoredToken] = {}

    async def insert(self, token: StoredToken) -> None:
        self.rows[token.token_id] = token

    async def get(self, token_id: str) -> StoredToken | None:
        return self.rows.get(token_id)

    async def revoke(self, token_id: str, at: datetime) -> bool:
        from dataclasses import replace

        if token_id not in self.rows:
            return False
        self.rows[token_id] = replace(self.rows[token_id], revoked_at=at)
        return True


async def test_personal_token_lifecycle() -> None:
    store = MemoryTokens()
    authenticator = TokenAuthenticator(VERIFIER, store, cache_seconds=30)
    token, token_id = new_personal_token()
    now = datetime.now(UTC)
    await store.insert(
        StoredToken(
            token_id,
            hash_token(token),
            "acme",
            "bob",
            Role.VIEWER,
            now + timedelta(days=1),
            now,
            "ann",
        )
    )
    principal = await authenticator.resolve(token)
    assert (principal.subject, principal.tenant, principal.role) == ("bob", "acme", Role.VIEWER)
    assert principal.token_id == token_id
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(Unauthenticated, match="unknown"):
        await authenticator.resolve(forged)
    await store.revoke(token_id, now)
    authenticator.forget(token_id)
    with pytest.raises(Unauthenticated, match="revoked"):
        await authenticator.resolve(token)
    expired, expired_id = new_personal_token()
    await store.insert(
        StoredToken(
            expired_id,
            hash_token(expired),
            "acme",
            "bob",
            Role.ADMIN,
            now - timedelta(seconds=1),
            now,
            "ann",
        )
    )
    with pytest.raises(Unauthenticated, match="expired"):
        await authenticator.resolve(expired)


def test_exp_as_a_numeric_string_is_refused() -> None:
    """PyJWT accepts "exp": "<digits>"; RFC 7519's NumericDate is a JSON number."""
    verifier = JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None)
    later = int(time.time()) + 3600
    as_string = jwt.encode(
        {"sub": "ann", "tenant": "acme", "role": "member", "exp": str(later)},
        TEST_JWT_SECRET,
        algorithm="HS256",
    )
    with pytest.raises(Unauthenticated, match="'exp' must be a number"):
        verifier.verify(as_string)
    assert verifier.verify(mint()).subject == "ann"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_bearer_scheme_is_case_insensitive(scheme: str) -> None:
    """RFC 7235 §2.1: auth schemes are case-insensitive."""
    assert bearer_token((("authorization", f"{scheme} tok"),)) == "tok"


@pytest.mark.parametrize("value", ["Basic tok", "Bearer", "Bearer   ", "tok", "Bearertok"])
def test_other_authorization_shapes_are_refused(value: str) -> None:
    with pytest.raises(Unauthenticated):
        bearer_token((("authorization", value),))
