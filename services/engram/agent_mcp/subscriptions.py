"""Resource subscriptions (`resources/subscribe`, `resources/unsubscribe`) driven by the
space's change feed, where the protocol gives a session a server->client channel: stdio and
the session-based streamable-HTTP revisions (the GET stream of an `Mcp-Session-Id`). The
sessionless 2026-07-28 revision has no such channel, and the server neither serves these
methods there nor advertises `resources.subscribe` (the SDK derives it per revision).

Per session: at most MAX_SUBSCRIPTIONS URIs and one WatchSpace stream (not one per URI) on
the session's space, as the session's caller - with the newest token the session presented,
since tokens expire. The stream starts with the first subscription (the subscribe answers
once the feed is live, so a change after the answer is never missed), stops with the last
unsubscribe or the session's end, and a change to a subscribed document sends
`notifications/resources/updated` with its URI. A watch that fails for good (token refused,
access revoked) stops and is logged; the session goes on, and the watch resumes from where it
stopped when the session presents a newer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram.agent_mcp.callers import Bound
from engram.agent_mcp.resources import SCHEME, resource_uri
from engram.client import SpaceChange, explain

# The feed's own errors (TOO_MANY_WATCHERS, CURSOR_EXPIRED) live beside ChangeKind: imported,
# a refusal the client receives keeps its reason rather than its family's.
from engram.domain.changes import ChangeKind
from engram.domain.errors import (
    EngramError,
    InvalidArgument,
    PermissionDenied,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from engram.domain.paths import validate_document_path

log = logging.getLogger("engram.mcp.subscriptions")

# Subscribed URIs one session may hold; a subscribe beyond is refused.
MAX_SUBSCRIPTIONS = 256
# How long a first subscribe waits for the change feed to be live.
READY_SECONDS = 10.0
# Where a session's watch lives (Connection.state).
STATE_KEY = "engram.subscriptions"

Binder = Callable[[ServerRequestContext[Any, Any], str], Bound]


class TooManySubscriptions(RateLimited):
    """RESOURCE_EXHAUSTED, as the feed's own TOO_MANY_WATCHERS."""

    reason = "TOO_MANY_SUBSCRIPTIONS"


class SessionWatch:
    """One session's subscribed paths and the one WatchSpace stream that serves them."""

    def __init__(self, connection: Connection, bound: Bound) -> None:
        self._connection = connection
        self._bound = bound
        self.paths: set[str] = set()
        self._cursor = ""
        self._task: asyncio.Task[None] | None = None
        # Done once the running watch is live (or has failed).
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready.set_result(None)
        # The token the watch last failed with for good: a newer one restarts it.
        self._refused_token: str | None = None

    @property
    def bound(self) -> Bound:
        return self._bound

    def present(self, bound: Bound) -> None:
        """The caller of a newer request of this session: its token serves the next (re)start
        of the watch, and restarts a watch the previous token could no longer hold."""
        if bound.space != self._bound.space or bound.caller != self._bound.caller:
            return
        self._bound = bound
        if self._refused_token is not None and bound.token != self._refused_token:
            self._refused_token = None
            if self.paths and not self.running:
                # Nobody waits on a restart: a failure is logged, not raised.
                self._start(awaited=False)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def subscribe(self, path: str) -> None:
        fresh = path not in self.paths
        if fresh and len(self.paths) >= MAX_SUBSCRIPTIONS:
            raise TooManySubscriptions(
                f"a session holds at most {MAX_SUBSCRIPTIONS} resource subscriptions: "
                "unsubscribe from one first"
            )
        self.paths.add(path)
        try:
            if not self.running:
                self._refused_token = None
                self._start(awaited=True)
            # Every subscribe answers once the feed is live (a concurrent one as well).
            async with asyncio.timeout(READY_SECONDS):
                await asyncio.shield(self._ready)
        except BaseException:
            if fresh:
                self.paths.discard(path)
            if not self.paths:
                await self.stop()
            raise

    async def unsubscribe(self, path: str) -> None:
        self.paths.discard(path)
        if not self.paths:
            await self.stop()
            # A later first subscribe follows from then on, not from this watch's cursor.
            self._cursor = ""

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _start(self, *, awaited: bool) -> None:
        """Starts the watch; `awaited`: a subscribe waits on it to be live (and hears its
        failure), otherwise a failure is only logged."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not awaited:
            ready.set_result(None)
        self._ready = ready
        self._task = asyncio.create_task(self._watch(ready), name="engram-mcp-watch")

    async def _watch(self, ready: asyncio.Future[None]) -> None:
        while True:
            bound = self._bound
            try:
                await self._follow(bound, ready)
            except (Unauthenticated, PermissionDenied) as error:
                if self._bound.token != bound.token:
                    continue  # the session presented a newer token meanwhile
                self._give_up(bound, error, ready)
                self._refused_token = bound.token
                return
            except EngramError as error:
                self._give_up(bound, error, ready)
                return

    async def _follow(self, bound: Bound, ready: asyncio.Future[None]) -> None:
        # From the last change seen (nothing missed across a restart), or from now.
        async for event in bound.client.watch_space(cursor=self._cursor, space=bound.space):
            if event.caught_up and not ready.done():
                ready.set_result(None)
            if event.change is not None:
                self._cursor = event.change.cursor
                await self._notify(event.change)

    async def _notify(self, change: SpaceChange) -> None:
        if change.kind == ChangeKind.SPACE_DELETED:
            changed = sorted(self.paths)
        else:
            changed = [change.path] if change.path in self.paths else []
        for path in changed:
            # Best effort: the SDK drops it when the client holds no GET stream.
            await self._connection.send_resource_updated(resource_uri(path))

    def _give_up(self, bound: Bound, error: EngramError, ready: asyncio.Future[None]) -> None:
        if not ready.done():
            ready.set_exception(error)
            return
        log.warning(
            "resource subscriptions of %s in %s/%s stopped: %s",
            bound.caller,
            bound.space.visibility,
            bound.space.name,
            explain(error),
            extra={"caller": bound.caller, "space": bound.space.name},
        )


def subscribed_path(uri: str) -> str:
    """The document path of a workspace resource URI; raises InvalidArgument otherwise."""
    if not uri.startswith(SCHEME):
        raise InvalidArgument(
            f"only workspace documents can be subscribed to ({SCHEME}<path>), not {uri[:200]!r}",
            field="uri",
        )
    return validate_document_path(uri[len(SCHEME) :], field="uri")


def session_connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The connection (the MCP session) a request came in on."""
    # The SDK hands handlers the session's per-request proxy only; its connection holds the
    # per-session state and teardown, and the SDK offers no public accessor to it.
    return ctx.session._connection


def watch_of(ctx: ServerRequestContext[Any, Any]) -> SessionWatch | None:
    watch = session_connection(ctx).state.get(STATE_KEY)
    return watch if isinstance(watch, SessionWatch) else None


def _refusal(error: EngramError) -> MCPError:
    if isinstance(error, InvalidArgument):
        code = INVALID_PARAMS
    elif isinstance(error, Unavailable):
        code = INTERNAL_ERROR
    else:
        code = INVALID_REQUEST
    return MCPError(code, explain(error), data={"reason": error.info_reason})


def _served(ctx: ServerRequestContext[Any, Any]) -> None:
    # The runner refuses these methods at the sessionless revision already; never watch
    # for a connection that could not carry the notification.
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(INVALID_REQUEST, "resources/subscribe is not part of this revision")


def handlers(bind: Binder) -> tuple[Any, Any]:
    """The `resources/subscribe` and `resources/unsubscribe` request handlers."""

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        _served(ctx)
        try:
            bound = bind(ctx, "resources/subscribe")
            path = subscribed_path(str(params.uri))
            connection = session_connection(ctx)
            watch = watch_of(ctx)
            if watch is None:
                watch = SessionWatch(connection, bound)
                connection.state[STATE_KEY] = watch
                connection.exit_stack.push_async_callback(watch.stop)
            elif watch.bound.space != bound.space or watch.bound.caller != bound.caller:
                raise InvalidArgument(
                    "this session's subscriptions are in another space: open a session per space",
                    field="uri",
                )
            watch.present(bound)
            await watch.subscribe(path)
        except TimeoutError:
            error = Unavailable(f"the change feed was not live within {READY_SECONDS:g} s")
            raise _refusal(error) from None
        except EngramError as error:
            raise _refusal(error) from None
        return EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        _served(ctx)
        try:
            bound = bind(ctx, "resources/unsubscribe")
            path = subscribed_path(str(params.uri))
        except EngramError as error:
            raise _refusal(error) from None
        present(ctx, bound)
        watch = watch_of(ctx)
        if watch is not None:
            await watch.unsubscribe(path)
        return EmptyResult()

    return subscribe, unsubscribe


def present(ctx: ServerRequestContext[Any, Any], bound: Bound) -> None:
    """Every request's caller refreshes its session's watch token (a no-op without one)."""
    watch = watch_of(ctx)
    if watch is not None:
        watch.present(bound)


__all__ = ["MAX_SUBSCRIPTIONS", "SessionWatch", "handlers", "present", "subscribed_path"]
