"""JWT keys from an identity provider's JWKS endpoint (a real HTTP server on loopback): key
rotation picked up from a new key id, unknown key ids refetching at a bounded rate, and
claims at the provider's paths (a namespaced tenant claim, Keycloak-style realm roles
mapped to engram's roles)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from engram.app.embedded import embedded_engram
from engram.client import AsyncClient, EngramError, PermissionDenied, Space, Unauthenticated
from tests.support.settings import server_settings

pytestmark = pytest.mark.e2e

TENANT_CLAIM = "https://engram.example/claims"
FORGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ROLE_MAP = {"engram-reader": "viewer", "engram-writer": "member", "engram-admin": "admin"}


@dataclass
class Provider:
    """A JWKS endpoint whose keys the test swaps; counts the fetches."""

    keys: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    fetches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def document(self) -> bytes:
        with self.lock:
            self.fetches += 1
            entries = []
            for kid, key in self.keys.items():
                entry = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
                entries.append({**entry, "kid": kid, "use": "sig", "alg": "RS256"})
        return json.dumps({"keys": entries}).encode()

    def rotate(self, kid: str) -> None:
        with self.lock:
            self.keys = {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048)}

    def token(self, kid: str, *, roles: list[str], tenant: str | None = "acme") -> str:
        claims: dict[str, Any] = {
            "sub": "ann",
            "exp": int(time.time() + 600),
            "realm_access": {"roles": roles},
        }
        if tenant is not None:
            claims[TENANT_CLAIM] = {"tenant": tenant}
        key = self.keys.get(kid) or FORGER
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def provider() -> Iterator[tuple[Provider, str]]:
    state = Provider()
    state.rotate("k1")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = state.document()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
async def storage(tmp_path: Path, provider: tuple[Provider, str]) -> AsyncIterator[AsyncClient]:
    settings = server_settings(
        tmp_path / "engram",
        jwks_url=provider[1],
        jwks_refresh_min_seconds=1.0,
        jwt_claim_tenant=f"{TENANT_CLAIM}.tenant",
        jwt_claim_role="realm_access.roles",
        jwt_role_map=ROLE_MAP,
    )
    async with (
        embedded_engram(settings, require_auth=True) as engram,
        AsyncClient(f"127.0.0.1:{engram.port}", space=Space(name="notes")) as client,
    ):
        yield client


async def write(client: AsyncClient, token: str) -> type[EngramError] | None:
    """The error class the write is refused with, None when it is accepted."""
    try:
        await client.as_caller(token).write_document("MEMORY.md", "# from the IdP\n")
    except EngramError as error:
        return type(error)
    return None


async def test_claims_at_the_providers_paths_with_mapped_roles(
    storage: AsyncClient, provider: tuple[Provider, str]
) -> None:
    idp = provider[0]
    writer = idp.token("k1", roles=["offline_access", "engram-reader", "engram-writer"])
    assert await write(storage, writer) is None
    # A reader maps to viewer: authenticated, but may not write.
    reader = idp.token("k1", roles=["offline_access", "engram-reader"])
    assert await write(storage, reader) is PermissionDenied
    # Roles the map does not know give no role at all.
    with pytest.raises(Unauthenticated) as refused:
        await storage.as_caller(idp.token("k1", roles=["offline"])).write_document("a.md", "x")
    assert "realm_access.roles" in refused.value.message
    no_tenant = idp.token("k1", roles=["engram-writer"], tenant=None)
    assert await write(storage, no_tenant) is Unauthenticated


async def test_a_rotated_key_is_picked_up_and_unknown_kids_refetch_at_a_bounded_rate(
    storage: AsyncClient, provider: tuple[Provider, str]
) -> None:
    idp = provider[0]
    assert await write(storage, idp.token("k1", roles=["engram-writer"])) is None
    fetched, started = idp.fetches, time.monotonic()
    # Made-up key ids: refused, and the provider is asked again at most once per second
    # (ENGRAM_JWKS_REFRESH_MIN_SECONDS) however many arrive.
    for n in range(50):
        bogus = idp.token(f"forged-{n}", roles=["engram-admin"])
        assert await write(storage, bogus) is Unauthenticated
    assert idp.fetches - fetched <= 1 + int(time.monotonic() - started)

    # The provider rotates to k2: once the refresh interval passed, the first k2 token
    # refetches the keys and is accepted; k1 tokens stop working after the refetch.
    idp.rotate("k2")
    await asyncio.sleep(1.1)
    assert await write(storage, idp.token("k2", roles=["engram-writer"])) is None
    # k1 is gone from the refetched set: its tokens are unknown now.
    assert await write(storage, idp.token("k1", roles=["engram-writer"])) is Unauthenticated
