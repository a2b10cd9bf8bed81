"""Identity for `engram dev --auth`: a JWT secret kept in the data directory and a printed
admin token for tenant `local`."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import jwt

from engram.domain.principals import LOCAL_ADMIN, LOCAL_TENANT

SECRET_FILE = "jwt-secret"
DEV_TOKEN_DAYS = 30


def load_or_create_secret(data_dir: Path) -> str:
    """The data directory's HS256 secret (created once, readable by its owner only)."""
    path = data_dir / SECRET_FILE
    if path.exists():
        return path.read_text().strip()
    secret = secrets.token_hex(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret)
    return secret


def dev_token(secret: str, *, audience: str | None = None, issuer: str | None = None) -> str:
    """A JWT for the local admin of tenant `local` (platform admin), valid 30 days, with
    the audience and issuer the server checks (ENGRAM_JWT_AUDIENCE, ENGRAM_JWT_ISSUER)."""
    claims: dict[str, object] = {
        "sub": LOCAL_ADMIN.subject,
        "tenant": LOCAL_TENANT,
        "role": "admin",
        "platform_admin": True,
        "exp": int(time.time()) + DEV_TOKEN_DAYS * 86400,
    }
    if audience is not None:
        claims["aud"] = audience
    if issuer is not None:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm="HS256")
