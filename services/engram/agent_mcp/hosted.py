"""Hosted `engram mcp`: one streamable-HTTP endpoint for many agents, an OAuth 2.0 resource
server as the MCP authorization spec asks.

- Every HTTP request carries its own `Authorization: Bearer <token>` (an engram personal
  access token or a JWT), verified by AuthzService.Authenticate - the same verification
  every engram service runs - and cached for a short while (never past a JWT's `exp`).
- A request without a valid token gets 401 with `WWW-Authenticate: Bearer ...,
  resource_metadata="<url>"`; the Protected Resource Metadata (RFC 9728) at
  /.well-known/oauth-protected-resource (and /.well-known/oauth-protected-resource/mcp)
  names the issuer of engram's tokens as the authorization server.
- The space comes from the request path (engram.agent_mcp.callers). A request may pin its
  tenant with the `X-Engram-Tenant` header: a token of another tenant then gets 403.
- A session belongs to the credential that opened it (the SDK answers 404 to another).

The MCP SDK's own auth pieces do the HTTP side (BearerAuthBackend, RequireAuthMiddleware,
the RFC 9728 handler); engram supplies the verifier and the space gate. A POST to the MCP
endpoint (every tool call) skips Starlette's stack: HostedApp reads and verifies its bearer
token as BearerAuthBackend does, on every request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator

import jwt
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, auth_context_var
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.streamable_http_manager import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    StreamableHTTPASGIApp,
)
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, UnauthenticatedUser
from starlette.datastructures import State
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engram.agent_mcp.callers import SPACE_STATE_KEY, space_from_path
from engram.agent_mcp.lean import LeanToolCalls
from engram.agent_mcp.tools import EngramMCPServer
from engram.client import EngramClient, explain
from engram.domain.errors import EngramError, Unauthenticated
from engram.runtime.ttl_cache import TtlCache

log = logging.getLogger("engram.mcp")

HTTP_PATH = "/mcp"
TENANT_HEADER = "x-engram-tenant"
# Where RFC 9728 puts the metadata of a resource at the host's root.
WELL_KNOWN = "/.well-known/oauth-protected-resource"
# Issuer comparison is exact (RFC 8414): a path-less URL keeps its spelling, no "/" added.
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))
# As long as a server caches a verified token (ENGRAM_AUTH_CACHE_SECONDS' default).
DEFAULT_CACHE_SECONDS = 30.0


class EngramTokenVerifier:
    """The MCP SDK's TokenVerifier over AuthzService.Authenticate, with a short cache."""

    def __init__(
        self, client: EngramClient, *, issuer: str, cache_seconds: float = DEFAULT_CACHE_SECONDS
    ) -> None:
        self._client = client
        self._issuer = issuer
        self._cache_seconds = cache_seconds
        self._cache: TtlCache[str, AccessToken] = TtlCache(ttl=cache_seconds, size=10_000)

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(digest)
        if cached is not None and (cached.expires_at or 0) > time.time():
            return cached
        try:
            principal = await self._client.authenticate(token)
        except Unauthenticated:
            return None
        expires = _jwt_expiry(token) or int(time.time() + self._cache_seconds)
        verified = AccessToken(
            token=token,
            # One key per principal: the SDK binds each session to it.
            client_id=f"{principal.tenant}/{principal.subject}",
            subject=principal.subject,
            scopes=[],
            expires_at=expires,
            claims={"iss": self._issuer, "tenant": principal.tenant, "service": principal.service},
        )
        self._cache.put(digest, verified)
        return verified


def _jwt_expiry(token: str) -> int | None:
    """A JWT's `exp` (read only to bound the cache: the server verified the token)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    return int(exp) if isinstance(exp, int | float) else None


async def _refuse(
    send: Send, status: int, error: str, description: str, metadata_url: str | None = None
) -> None:
    body = json.dumps({"error": error, "error_description": description}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if metadata_url:
        challenge = (
            f'Bearer error="{error}", error_description="{description}", '
            f'resource_metadata="{metadata_url}"'
        )
        headers.append((b"www-authenticate", challenge.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class SpaceGate:
    """Reads the space from the path (404 for a malformed one), refuses a token of another
    tenant than `X-Engram-Tenant` (403), then hands the request to the SDK's endpoint at
    /mcp."""

    def __init__(self, app: ASGIApp, metadata_url: str) -> None:
        self._app = app
        self._metadata_url = metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rest = (scope.get("path_params") or {}).get("space")
        state = scope.setdefault("state", {})
        tenant = _header(scope, TENANT_HEADER)
        user = scope.get("user")
        if isinstance(user, AuthenticatedUser) and tenant:
            claims = user.access_token.claims or {}
            if claims.get("tenant") != tenant and not claims.get("service"):
                description = f"this token is not of tenant {tenant}"
                await _refuse(send, 403, "insufficient_scope", description, self._metadata_url)
                return
        if rest is not None:
            try:
                space = space_from_path(rest)
            except EngramError as error:
                await _refuse(send, 404, "not_found", explain(error))
                return
            if tenant:
                space = dataclasses.replace(space, tenant=tenant)
            state[SPACE_STATE_KEY] = space
        await self._app(dict(scope, path=HTTP_PATH, raw_path=HTTP_PATH.encode()), receive, send)


def _header(scope: Scope, name: str) -> str:
    for key, value in scope.get("headers") or ():
        if key.decode("latin-1").lower() == name:
            return str(value.decode("latin-1")).strip()
    return ""


class HostedApp:
    """The hosted app's ASGI entry. A POST to the MCP endpoint (/mcp, /mcp/<space path>) -
    every tools/call - goes straight to the endpoint's own stack (the bearer check, the space
    gate, the lean path, the SDK) after exactly what the Starlette app around it would do
    first: its error page (ServerErrorMiddleware), the bearer authentication of
    BearerAuthBackend, the auth context, and the route's path parameters. Every other
    request (the RFC 9728 metadata, GET, DELETE, lifespan, another path) goes to the
    Starlette app. Why: Starlette's middleware and router, and the header objects the
    authentication backend builds, cost about 5 % of the MCP process's CPU per call
    (bench/RESULTS.md, issue 31)."""

    def __init__(self, app: Starlette, verifier: EngramTokenVerifier, endpoint: ASGIApp) -> None:
        self.app = app
        # The Starlette app's state (its `lean`), read through this entry as through the app.
        self.state: State = app.state
        self._verifier = verifier
        self._endpoint = endpoint
        self._post = ServerErrorMiddleware(self._authenticated)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            path: str = scope["path"]
            if path == HTTP_PATH:
                params: dict[str, str] = {}
            elif path.startswith(_SPACE_PREFIX):
                params = {"space": path[len(_SPACE_PREFIX) :]}
            else:
                await self.app(scope, receive, send)
                return
            # As Starlette and its router set them for the /mcp routes.
            scope["app"] = self.app
            scope.setdefault("router", self.app.router)
            scope["endpoint"] = self._endpoint
            scope["path_params"] = params
            await self._post(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _authenticated(self, scope: Scope, receive: Receive, send: Send) -> None:
        """AuthenticationMiddleware with BearerAuthBackend, then AuthContextMiddleware."""
        user = await self._user(scope)
        if user is None:
            scope["auth"], scope["user"] = AuthCredentials(), UnauthenticatedUser()
            await self._endpoint(scope, receive, send)
            return
        scope["auth"], scope["user"] = AuthCredentials(user.scopes), user
        context = auth_context_var.set(user)
        try:
            await self._endpoint(scope, receive, send)
        finally:
            auth_context_var.reset(context)

    async def _user(self, scope: Scope) -> AuthenticatedUser | None:
        """The request's verified bearer token, as BearerAuthBackend.authenticate reads it:
        the first Authorization header, verified on every request, refused once expired."""
        header = next((value for key, value in scope["headers"] if key == b"authorization"), None)
        if header is None:
            return None
        value = header.decode("latin-1")
        if not value.lower().startswith("bearer "):
            return None
        verified = await self._verifier.verify_token(value[7:])
        if verified is None or (verified.expires_at and verified.expires_at < int(time.time())):
            return None
        return AuthenticatedUser(verified)


_SPACE_PREFIX = HTTP_PATH + "/"


def hosted_app(
    server: EngramMCPServer,
    verifier: EngramTokenVerifier,
    *,
    resource_url: str,
    issuer: str,
    host: str,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
) -> HostedApp:
    """The ASGI app of a hosted MCP server: `server`'s streamable-HTTP endpoint behind
    bearer authentication, at /mcp and /mcp/<space path>, and its RFC 9728 metadata; a
    session ends after `session_idle_timeout` seconds without a request (the SDK's 30 min)."""
    # Answers as plain JSON rather than an SSE stream per POST: the tools send no progress
    # or server requests mid-call, and a JSON body costs less per call.
    server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        host=host,
        json_response=True,
        session_idle_timeout=session_idle_timeout,
    )
    # The session manager's own ASGI endpoint (the DNS-rebinding check and the body limit
    # are in it), without the one-route Starlette app the SDK wraps it in: this app already
    # routes, authenticates and handles errors, and a second stack cost every call.
    manager = server.session_manager
    # tools/call of an engram tool is answered without the SDK's dispatch (engram.agent_mcp
    # .lean says why and what it answers); everything else goes to the SDK's endpoint.
    lean = LeanToolCalls(StreamableHTTPASGIApp(manager), server, manager)
    resource = _URL.validate_python(resource_url)
    metadata_url = str(build_resource_metadata_url(resource))
    endpoint = RequireAuthMiddleware(
        SpaceGate(lean, metadata_url), [], _URL.validate_python(metadata_url)
    )
    metadata_routes = create_protected_resource_routes(
        resource_url=resource,
        authorization_servers=[_URL.validate_python(issuer)],
        resource_name="Engram memory",
    )
    routes: list[Route] = [*metadata_routes]
    if metadata_routes[0].path != WELL_KNOWN:
        routes.append(
            Route(WELL_KNOWN, endpoint=metadata_routes[0].endpoint, methods=["GET", "OPTIONS"])
        )
    routes += [
        Route(HTTP_PATH, endpoint=endpoint),
        Route(HTTP_PATH + "/{space:path}", endpoint=endpoint),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lifespan,
    )
    app.state.lean = lean
    return HostedApp(app, verifier, endpoint)
