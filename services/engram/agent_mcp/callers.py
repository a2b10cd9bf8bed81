"""Who a tool call acts for, and in which space.

Over stdio (and over HTTP with the process's own `--token`) every call is the process's one
caller in its one space. Hosted (`engram mcp --hosted`), each HTTP request carries its own
bearer token, which the server forwards to WorkspaceService (so the workspace authorizes,
rate-limits and records that caller, never the MCP process), and names its space in the
request path:

    /mcp                                   the server's default space (--visibility/--name)
    /mcp/<visibility>/<name>               private, user, org, cross_project, global
    /mcp/project/<project>/<name>          a project space
    /mcp/bot/<project>/<bot>/<name>        a bot space

Tenant and user always come from the caller's identity, as on every surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

from engram.client import EngramClient, Space
from engram.domain.errors import InvalidArgument, Unauthenticated
from engram.runtime.ttl_cache import TtlCache

# Where the hosted app leaves the space it read from the request path (scope["state"]).
SPACE_STATE_KEY = "engram_space"
# Path segments after the visibility, per visibility: the qualifiers, then the name.
QUALIFIERS: Mapping[str, tuple[str, ...]] = {
    "project": ("project",),
    "bot": ("project", "bot"),
}


@dataclass(frozen=True, slots=True)
class Bound:
    """One tool call's caller: the client acting as it, its space, a key naming the caller
    (the same for every call of one principal), and the bearer token it presented (hosted;
    empty when the process's own)."""

    client: EngramClient
    space: Space
    caller: str
    token: str = ""


class Callers(Protocol):
    def bind(self, request: Any) -> Bound:
        """The caller of one MCP message (`request`: the HTTP request it came in, or None
        over stdio); raises Unauthenticated when a hosted request carries no identity."""
        ...


class ProcessCaller:
    """Every call is the process's own: its client's token and default space."""

    def __init__(self, client: EngramClient) -> None:
        self._bound = Bound(client, client.space, caller="process")

    def bind(self, request: Any) -> Bound:
        return self._bound


class HostedCallers:
    """Each HTTP request's own bearer token (checked by the transport before any message is
    read) and the space its path names."""

    def __init__(self, client: EngramClient) -> None:
        self._client = client
        # An agent calls again and again with one token in one space: its client copy is
        # made once (a token is verified on every request all the same, by the transport
        # here and by WorkspaceService).
        self._bound: TtlCache[tuple[str, str, Space], Bound] = TtlCache(ttl=300.0, size=4096)

    def bind(self, request: Any) -> Bound:
        scope: Mapping[str, Any] = getattr(request, "scope", None) or {}
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            raise Unauthenticated("this MCP server needs a bearer token on every request")
        state = scope.get("state") or {}
        space = state.get(SPACE_STATE_KEY) or self._client.space
        token = user.access_token
        key = (token.token, token.client_id, space)
        bound = self._bound.get(key)
        if bound is None:
            bound = Bound(
                self._client.as_caller(token.token, space=space),
                space,
                token.client_id,
                token=token.token,
            )
            self._bound.put(key, bound)
        return bound


# A few spaces take most requests: each path is parsed once (a refused one every time).
@lru_cache(maxsize=4096)
def space_from_path(rest: str) -> Space:
    """The space named by the path after /mcp/ (see the module's docstring); raises
    InvalidArgument naming the expected form."""
    segments = rest.strip("/").split("/")
    visibility, qualifiers = segments[0], segments[1:-1]
    wanted = QUALIFIERS.get(visibility, ())
    expected = "/".join(f"<{q}>" for q in (*wanted, "name"))
    if len(segments) != len(wanted) + 2 or not all(segments):
        raise InvalidArgument(
            f"a {visibility or '<visibility>'} space is addressed as /mcp/"
            f"{visibility or '<visibility>'}/{expected}",
            field="path",
        )
    values = dict(zip(wanted, qualifiers, strict=True))
    return Space(visibility, segments[-1], values.get("project", ""), values.get("bot", ""))
