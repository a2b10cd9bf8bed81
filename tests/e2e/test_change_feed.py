"""WatchSpace on `engram dev`: the change feed read from the SQLite outbox.

Covers: a watcher disconnected mid-burst of 500 writes resumes from its cursor across a
restart of the server and receives every change exactly once and in order; replay from the
start with caught_up; deletes; reads refused to another tenant and to no token; a cursor
whose changes were pruned is refused with CURSOR_EXPIRED while a newer one still works; the
retention prunes published events only; a database made before the feed is migrated; the
per-process watcher limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.app.adapters import DATABASE_FILE
from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.authz.tokens import JwtVerifier, TokenAuthenticator
from engram.cli.app import app
from engram.client import (
    AsyncClient,
    InvalidArgument,
    PermissionDenied,
    RateLimited,
    Space,
    Unauthenticated,
)
from engram.events.sqlite_feed import FeedOptions, SqliteChangeFeed
from engram.storage.sqlite_outbox import SqliteOutbox
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint
from tests.support.watching import (
    NOTES,
    Watch,
    assert_exactly_once_in_order,
    burst_with_disconnect_and_restart,
    first_change,
)

pytestmark = pytest.mark.e2e

SPACE_ID = "v1:private:local::::notes"


@contextlib.asynccontextmanager
async def dev(data_dir: Path, **overrides: object) -> AsyncIterator[EmbeddedEngram]:
    async with embedded_engram(server_settings(data_dir, **overrides)) as engram:
        yield engram


def client(engram: EmbeddedEngram, token: str = "", space: Space = NOTES) -> AsyncClient:
    return AsyncClient(f"127.0.0.1:{engram.port}", token=token, space=space, retries=0)


async def write(engram: EmbeddedEngram, path: str, content: str) -> None:
    async with client(engram) as writer:
        await writer.write_document(path, content)


@pytest.mark.timeout(600)
async def test_500_writes_disconnect_and_restart_exactly_once_in_order(tmp_path: Path) -> None:
    @contextlib.asynccontextmanager
    async def start() -> AsyncIterator[int]:
        async with dev(tmp_path, shutdown_grace_seconds=1.0) as engram:
            yield engram.port

    changes = await burst_with_disconnect_and_restart(start, count=500, paths=50, within=240)
    assert_exactly_once_in_order(changes, count=500, paths=50, global_order=True)


async def test_replay_from_start_then_live_with_deletes(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        async with client(engram) as writer:
            written = await writer.write_document("a.md", "alpha")
            await writer.write_document("b.md", "beta")
            await writer.delete_document("a.md")
            # Another space's change is not this space's.
            await writer.write_document("c.md", "gamma", space=Space(name="other"))
            async with Watch(engram.port, from_start=True) as replay:
                await asyncio.wait_for(replay.caught_up.wait(), 30)
                assert [(c.kind, c.path, c.version) for c in replay.changes] == [
                    ("written", "a.md", 1),
                    ("written", "b.md", 1),
                    ("deleted", "a.md", 1),
                ]
                first = replay.changes[0]
                assert first.document_id == written.document.document_id
                assert first.sha256 == written.document.sha256 and first.size_bytes == 5
                assert first.event_id and first.at is not None
                # Live: the next write arrives without asking again.
                await writer.write_document("b.md", "beta two")
                await replay.received(4, within=10)
                assert (replay.changes[3].path, replay.changes[3].version) == ("b.md", 2)
            # Reindexing names documents but changes none: the feed leaves it out.
            await writer.reindex([NOTES])
            assert await engram.relay.drained(60)
            async with Watch(engram.port, from_start=True) as again:
                await asyncio.wait_for(again.caught_up.wait(), 30)
                assert len(again.changes) == 4
            async with Watch(engram.port) as live:
                await asyncio.wait_for(live.caught_up.wait(), 30)
                assert live.changes == [], "an empty cursor starts with the next change"


async def test_other_tenant_and_anonymous_refused(tmp_path: Path) -> None:
    authenticator = TokenAuthenticator(
        JwtVerifier(secret=TEST_JWT_SECRET, jwks_path=None), None, cache_seconds=0
    )
    async with embedded_engram(server_settings(tmp_path), authenticator=authenticator) as engram:
        plans = Space(name="plans", tenant="globex")
        async with client(engram, mint("bob", "globex", "member"), plans) as owner:
            await owner.write_document("p.md", "secret plan")
            for role in ("viewer", "member", "admin"):
                with pytest.raises(PermissionDenied):
                    await first_change(
                        owner.as_caller(mint("eve", "acme", role), space=plans), from_start=True
                    )
            with pytest.raises(Unauthenticated):
                await first_change(owner.as_caller("", space=plans), from_start=True)
            # The owner's tenant reads it; a viewer may watch (a read).
            reader = owner.as_caller(mint("vic", "globex", "viewer"), space=plans)
            change = await first_change(reader, from_start=True)
            assert change is not None and change.path == "p.md"


async def test_bad_cursor_and_watcher_limit(tmp_path: Path) -> None:
    async with dev(tmp_path, feed_max_watchers=2) as engram:
        async with client(engram) as watcher:
            await watcher.write_document("a.md", "alpha")
            for cursor in ("abc", "-1", "1" * 20):
                with pytest.raises(InvalidArgument):
                    await first_change(watcher, cursor=cursor)
            with pytest.raises(InvalidArgument):
                await first_change(watcher, cursor="1", from_start=True)
            with pytest.raises(InvalidArgument) as ahead:
                await first_change(watcher, cursor="999999")
            assert ahead.value.info_reason == "CURSOR_AHEAD"
            assert "--from-start" in ahead.value.message
            async with Watch(engram.port) as one, Watch(engram.port) as two:
                await asyncio.wait_for(one.caught_up.wait(), 30)
                await asyncio.wait_for(two.caught_up.wait(), 30)
                with pytest.raises(RateLimited) as refused:
                    await first_change(watcher)
                assert refused.value.info_reason == "TOO_MANY_WATCHERS"
            # Closed watches give their slots back.
            for _ in range(200):
                if not engram.storage._watchers.taken:
                    break
                await asyncio.sleep(0.05)
            assert not engram.storage._watchers.taken
            async with Watch(engram.port, from_start=True) as again:
                await asyncio.wait_for(again.caught_up.wait(), 30)
                assert [c.path for c in again.changes] == ["a.md"]


async def test_retention_prunes_published_events_and_expires_old_cursors(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        for i in range(3):
            await write(engram, "old.md", f"old {i}")
        assert await engram.relay.drained(30)
        async with Watch(engram.port, from_start=True) as replay:
            await asyncio.wait_for(replay.caught_up.wait(), 30)
            old_cursors = [c.cursor for c in replay.changes]
        assert len(old_cursors) == 3
        # A week and a bit later, as the retention sees it: those three are past it.
        later = datetime.now(UTC) + timedelta(hours=169)
        feed = SqliteChangeFeed(engram.database, FeedOptions(), clock=lambda: later)
        # Recorded after the clock's cutoff would keep them; these come after the pruning.
        assert await feed.prune_once() == 3
        await write(engram, "new.md", "new")
        assert await engram.relay.drained(30)

        async with client(engram) as watcher:
            with pytest.raises(InvalidArgument) as expired:
                await first_change(watcher, cursor=old_cursors[0])
            assert expired.value.info_reason == "CURSOR_EXPIRED"
            assert "--from-start" in expired.value.message
        # The last pruned cursor has nothing after it pruned: it resumes with the new change.
        async with Watch(engram.port, cursor=old_cursors[-1]) as resumed:
            await asyncio.wait_for(resumed.caught_up.wait(), 30)
            assert [c.path for c in resumed.changes] == ["new.md"]
        async with Watch(engram.port, from_start=True) as replay:
            await asyncio.wait_for(replay.caught_up.wait(), 30)
            assert [c.path for c in replay.changes] == ["new.md"]


async def test_unpublished_events_are_never_pruned(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        await engram.relay.stop(drain_seconds=0)
        await write(engram, "pending.md", "not yet published")
        later = datetime.now(UTC) + timedelta(days=30)
        feed = SqliteChangeFeed(engram.database, FeedOptions(), clock=lambda: later)
        assert await feed.prune_once() == 0
        assert await SqliteOutbox(engram.database).backlog() == 1


async def test_database_from_before_the_feed_is_migrated(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        await write(engram, "a.md", "alpha")
        assert await engram.relay.drained(30)
        await engram.relay.stop(drain_seconds=0)
        await write(engram, "b.md", "beta")
    # The old layout: no space_id / published columns, published events deleted, b.md's
    # event still waiting to be published.
    with contextlib.closing(sqlite3.connect(tmp_path / DATABASE_FILE)) as connection:
        connection.executescript(
            "DROP INDEX outbox_by_space; DROP INDEX outbox_unpublished; DROP INDEX outbox_by_time;"
            "DELETE FROM outbox WHERE published = 1;"
            "ALTER TABLE outbox DROP COLUMN space_id; ALTER TABLE outbox DROP COLUMN published;"
            "DROP TABLE outbox_retention;"
        )
    async with dev(tmp_path) as engram:
        assert await engram.relay.drained(30)
        async with Watch(engram.port, from_start=True) as replay:
            await asyncio.wait_for(replay.caught_up.wait(), 30)
            assert [c.path for c in replay.changes] == ["b.md"]
        await write(engram, "c.md", "gamma")
        async with Watch(engram.port, from_start=True) as replay:
            await asyncio.wait_for(replay.caught_up.wait(), 30)
            assert [c.path for c in replay.changes] == ["b.md", "c.md"]


async def test_cli_watch_prints_changes_as_json_lines(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        await write(engram, "a.md", "alpha")
        await write(engram, "b.md", "beta")
        args = ["watch", "--name", "notes", "--from-start", "--json", "--count", "2"]
        result = await asyncio.wait_for(
            asyncio.to_thread(
                CliRunner().invoke, app, [*args, "--addr", f"127.0.0.1:{engram.port}"]
            ),
            60,
        )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(r["kind"], r["path"], r["version"]) for r in lines] == [
        ("written", "a.md", 1),
        ("written", "b.md", 1),
    ]
    assert int(lines[0]["cursor"]) < int(lines[1]["cursor"])


async def test_cli_watch_explains_errors(tmp_path: Path) -> None:
    async with dev(tmp_path) as engram:
        result = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["watch", "--cursor", "nope", "--addr", f"127.0.0.1:{engram.port}"],
        )
    assert result.exit_code == 1
    assert "INVALID_ARGUMENT" in result.output and "Traceback" not in result.output
