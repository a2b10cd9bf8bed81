"""Minting JWTs the way an identity provider would, for tests."""

from __future__ import annotations

import time
from typing import Any

import jwt

TEST_JWT_SECRET = "engram-test-secret-" + "0123456789abcdef" * 4


def mint(
    sub: str = "ann",
    tenant: str = "acme",
    role: str = "member",
    *,
    secret: str = TEST_JWT_SECRET,
    ttl: float = 3600,
    **claims: Any,
) -> str:
    body: dict[str, Any] = {
        "sub": sub,
        "tenant": tenant,
        "role": role,
        "exp": int(time.time() + ttl),
        **claims,
    }
    return jwt.encode({k: v for k, v in body.items() if v is not None}, secret, algorithm="HS256")


def service_token(sub: str = "indexer", *, secret: str = TEST_JWT_SECRET) -> str:
    return mint(sub, tenant=None, role=None, secret=secret, service=True)  # type: ignore[arg-type]


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)
