"""WorkspaceService over gRPC on the all-in-one server: every rule of the memory tools
(issue 12), the bad inputs, and what a caller sees in the answers and the stored documents.
The workspace's clock is the test's, so dates and midnight are chosen, not waited for.

Calls go through engram.client, as any caller's; a few requests the client cannot express
(an unset or undefined target, a path beside a fixed target) go on the wire as sent."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.client import (
    AsyncClient,
    DocumentNotFound,
    Heartbeat,
    InvalidArgument,
    InvalidPath,
    NotFound,
    PermissionDenied,
    ProtectedFile,
    RateLimited,
    SeedResult,
    Space,
    SystemPrompt,
    WriteResult,
)
from engram.domain.workspace import PROTECTED_FILES
from engram.v1 import workspace_pb2, workspace_pb2_grpc
from tests.support.grpc_helpers import fails, space
from tests.support.settings import server_settings

pytestmark = pytest.mark.contract

START = datetime(2026, 12, 1, 10, 15, 0, tzinfo=UTC)
TODAY_LOG = "daily/2026-12-01.md"
OK_SPACE = Space(name="agent")


@dataclass
class Clock:
    """The workspace's clock, moved by the test."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Workspace:
    engram: EmbeddedEngram
    clock: Clock
    # engram.client in the agent's space (OK_SPACE): the memory tools and StorageService.
    client: AsyncClient
    # The wire itself, for the requests the client cannot express.
    wire: workspace_pb2_grpc.WorkspaceServiceStub

    async def write(self, content: str, **options: Any) -> WriteResult:
        return await self.client.memory_write(content, **options)

    async def read(self, path: str, space: Space = OK_SPACE) -> str:
        return (await self.client.memory_read(path, space=space)).content


@contextlib.asynccontextmanager
async def start_workspace(tmp_path: Path, **settings: Any) -> AsyncIterator[Workspace]:
    """An all-in-one server whose workspace runs on the returned clock."""
    clock = Clock()
    async with embedded_engram(server_settings(tmp_path / "engram", **settings), clock=clock) as e:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{e.port}") as channel:
            yield Workspace(
                e,
                clock,
                AsyncClient(channel=channel, space=OK_SPACE),
                workspace_pb2_grpc.WorkspaceServiceStub(channel),
            )


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[Workspace]:
    async with start_workspace(tmp_path) as running:
        yield running


# --- memory_write ------------------------------------------------------------------------------


async def test_memory_appends_on_new_lines_and_is_append_only(ws: Workspace) -> None:
    first = await ws.write("Ann prefers tea.", target="memory")
    assert (first.status, first.path, first.append) == ("written", "MEMORY.md", True)
    assert first.content_length == len(b"Ann prefers tea.\n")
    assert first.version == 1 and len(first.sha256) == 64
    second = await ws.write("Deploys on Fridays are off.", target="memory")
    assert second.version == 2 and second.size_bytes == first.size_bytes + second.content_length
    assert await ws.read("MEMORY.md") == "Ann prefers tea.\nDeploys on Fridays are off.\n"
    # Seed 004: the agent never rewrites MEMORY.md (by target or by path); the operator
    # does through StorageService, and HEARTBEAT.md and notes stay replaceable.
    for target in ("memory", "MEMORY.md"):
        with pytest.raises(PermissionDenied) as failure:
            await ws.write("# Memory\n", append=False, target=target)
        assert failure.value.info_reason == "MEMORY_APPEND_ONLY"
        assert "ENGRAM_WORKSPACE_MEMORY_APPEND_ONLY" in failure.value.message
    assert await ws.read("MEMORY.md") == "Ann prefers tea.\nDeploys on Fridays are off.\n"
    note = await ws.write("# Plan\n", target="notes/p.md", append=False)
    assert note.append is False
    beat = await ws.write("all quiet", target="heartbeat", append=False)
    assert beat.path == "HEARTBEAT.md"


async def test_a_space_policy_may_let_the_agent_replace_memory(tmp_path: Path) -> None:
    async with start_workspace(tmp_path, workspace_memory_append_only=False) as ws:
        await ws.write("Ann prefers tea.", target="memory")
        replaced = await ws.write("# Memory\n", target="memory", append=False)
        assert replaced.append is False and replaced.content_length == len(b"# Memory\n")
        assert await ws.read("MEMORY.md") == "# Memory\n"


async def test_append_starts_a_new_line_after_an_operator_edit(ws: Workspace) -> None:
    await ws.client.write_document("notes/plan.md", "no newline at the end")
    response = await ws.write("next step", target="notes/plan.md")
    assert response.content_length == len(b"\nnext step\n")
    assert await ws.read("notes/plan.md") == "no newline at the end\nnext step\n"


async def test_daily_log_entries_are_timestamped_under_a_header(ws: Workspace) -> None:
    # Target unset (which the client never sends) = the daily log.
    first = await ws.wire.MemoryWrite(
        workspace_pb2.MemoryWriteRequest(space=space("agent"), content="started the migration")
    )
    assert first.path == TODAY_LOG
    assert first.content_length == len(
        b"# Daily Log - 2026-12-01\n\n[10:15:00] started the migration\n"
    )
    ws.clock.now = START + timedelta(minutes=1, seconds=2)
    appended = await ws.client.append_daily_log("migration done")
    assert appended.path == TODAY_LOG
    assert appended.content_length == len(b"[10:16:02] migration done\n")
    assert await ws.read(TODAY_LOG) == (
        "# Daily Log - 2026-12-01\n\n[10:15:00] started the migration\n[10:16:02] migration done\n"
    )


async def test_a_session_gets_its_own_journal(ws: Workspace) -> None:
    written = await ws.write("from the phone", target="daily_log", session="phone-1")
    assert written.path == "daily/2026-12-01-phone-1.md"
    logged = await ws.client.append_daily_log("again", session="phone-1")
    assert logged.path == written.path
    assert (await ws.read(written.path)).endswith("[10:15:00] from the phone\n[10:15:00] again\n")


async def test_read_by_date_finds_the_days_log_in_the_callers_time_zone(ws: Workspace) -> None:
    def by_date(day: str, **options: str) -> Any:
        return ws.client.memory_read(date=day, **options)

    await ws.write("today's entry")
    await ws.write("phone entry", session="phone")
    await ws.client.write_document("memory/2026-11-30.md", "imported yesterday\n")
    today = await by_date("today")
    assert today.path == "daily/2026-12-01.md" and "today's entry" in today.content
    assert (await by_date("2026-12-01")).path == "daily/2026-12-01.md"
    assert (await by_date("today", session="phone")).path == "daily/2026-12-01-phone.md"
    # No daily/ log that day: the imported memory/ journal.
    assert (await by_date("yesterday")).path == "memory/2026-11-30.md"
    # 10:15 UTC is 23:15 in Auckland (UTC+13): its today is still the 1st; Honolulu's
    # yesterday is the 30th too, Kiritimati's (UTC+14) today the 2nd.
    assert (await by_date("today", time_zone="Pacific/Auckland")).path == "daily/2026-12-01.md"
    with pytest.raises(NotFound) as missing:
        await by_date("today", time_zone="Pacific/Kiritimati")
    assert "2026-12-02" in missing.value.message
    for bad in ("tomorrow", "2026-13-01", "20261201"):
        with pytest.raises(InvalidArgument) as refused:
            await by_date(bad)
        assert "YYYY-MM-DD" in refused.value.message
    with pytest.raises(InvalidArgument):
        await ws.client.memory_read("MEMORY.md", date="today")


async def test_daily_log_rolls_over_at_local_midnight(ws: Workspace) -> None:
    # Berlin is UTC+1 in December: 22:59:59 UTC is 23:59:59 there, 23:00:01 UTC the next day.
    ws.clock.now = datetime(2026, 12, 1, 22, 59, 59, tzinfo=UTC)
    before = await ws.write("last of the day", time_zone="Europe/Berlin")
    ws.clock.now = datetime(2026, 12, 1, 23, 0, 1, tzinfo=UTC)
    after = await ws.write("first of the next", time_zone="Europe/Berlin")
    in_utc = await ws.write("still the 1st in UTC")
    assert (before.path, after.path, in_utc.path) == (
        "daily/2026-12-01.md",
        "daily/2026-12-02.md",
        "daily/2026-12-01.md",
    )
    assert await ws.read("daily/2026-12-02.md") == (
        "# Daily Log - 2026-12-02\n\n[00:00:01] first of the next\n"
    )
    assert await ws.read("daily/2026-12-01.md") == (
        "# Daily Log - 2026-12-01\n\n[23:59:59] last of the day\n[23:00:01] still the 1st in UTC\n"
    )


async def test_heartbeat_target_writes_heartbeat_md(ws: Workspace) -> None:
    written = await ws.write("alive", target="heartbeat")
    assert written.path == "HEARTBEAT.md"


@pytest.mark.parametrize("content", ["", "   \n\t"])
async def test_empty_content_is_refused(ws: Workspace, content: str) -> None:
    with pytest.raises(InvalidArgument) as failure:
        await ws.write(content)
    assert "content is required" in failure.value.message
    with pytest.raises(InvalidArgument) as failure:
        await ws.client.append_daily_log(content)
    assert "entry is required" in failure.value.message


@pytest.mark.parametrize(
    ("options", "field", "says"),
    [
        ({"time_zone": "Mars/Olympus"}, "time_zone", "Mars/Olympus"),
        ({"time_zone": "../etc/passwd"}, "time_zone", "IANA"),
        ({"session": "a/b"}, "session", "session"),
        ({"session": "x" * 65}, "session", "1..64"),
        ({"target": ""}, "path", "path is required"),
        ({"target": "notes.txt"}, "path", ".md"),
    ],
)
async def test_bad_write_fields_are_invalid_argument(
    ws: Workspace, options: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidArgument) as failure:
        await ws.write("x", **options)
    assert says in failure.value.message
    assert failure.value.field == field


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"target": 99}, "target", "MEMORY_TARGET_MEMORY"),
        (
            {"target": workspace_pb2.MEMORY_TARGET_MEMORY, "path": "x.md"},
            "path",
            "MEMORY_TARGET_PATH",
        ),
    ],
)
async def test_write_fields_the_client_cannot_send_are_invalid_argument(
    ws: Workspace, fields: dict[str, Any], field: str, says: str
) -> None:
    """An undefined target, and a path beside a fixed target, as another caller may send."""
    failure = await fails(
        ws.wire.MemoryWrite(
            workspace_pb2.MemoryWriteRequest(space=space("agent"), content="x", **fields)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert says in failure.message
    assert failure.details[1].field_violations[0].field == field


async def test_a_non_canonical_custom_path_names_the_canonical_form(ws: Workspace) -> None:
    for path, canonical in (("./notes/a.md", "notes/a.md"), ("notes//a.md", "notes/a.md")):
        with pytest.raises(InvalidPath) as failure:
            await ws.write("x", target=path)
        assert f'use "{canonical}"' in failure.value.message


# --- protected identity files -------------------------------------------------------------------


SPELLINGS = (*PROTECTED_FILES, "soul.md", "Agents.md", "iDENTITY.md", "User.md")


@pytest.mark.parametrize("name", SPELLINGS)
async def test_identity_files_cannot_be_written_through_a_path(ws: Workspace, name: str) -> None:
    await ws.client.write_document(name, "operator's text")
    for append in (True, False):
        with pytest.raises(ProtectedFile) as failure:
            await ws.write("I am evil now", target=name, append=append)
        assert "StorageService" in failure.value.message
    assert await ws.read(name) == "operator's text"


async def test_no_other_target_reaches_an_identity_file(ws: Workspace) -> None:
    """The fixed targets land in their own files, and neither a session nor a path spelled
    another way can climb to the root identity files."""
    paths = {
        (await ws.write("x", target=target)).path for target in ("memory", "daily_log", "heartbeat")
    }
    assert paths == {"MEMORY.md", TODAY_LOG, "HEARTBEAT.md"}
    with pytest.raises(InvalidArgument):
        await ws.write("x", session="../../SOUL")
    for sneaky in ("./SOUL.md", "daily/../SOUL.md", "/SOUL.md"):
        with pytest.raises(InvalidPath):
            await ws.write("x", target=sneaky)
    # A same-named file below the root is an ordinary note, not the identity file.
    nested = await ws.write("x", target="notes/SOUL.md")
    assert nested.path == "notes/SOUL.md"
    with pytest.raises(DocumentNotFound):
        await ws.read("SOUL.md")


# --- memory_read / memory_tree ------------------------------------------------------------------


async def test_read_returns_content_words_and_update_time(ws: Workspace) -> None:
    await ws.write("one two three", target="memory")
    response = await ws.client.memory_read("MEMORY.md")
    assert (response.path, response.content, response.word_count) == (
        "MEMORY.md",
        "one two three\n",
        3,
    )
    assert response.updated_at is not None
    assert abs(response.updated_at - datetime.now(UTC)) < timedelta(minutes=1)
    with pytest.raises(NotFound) as missing:
        await ws.client.memory_read("nope/x.md")
    assert "nope/x.md" in missing.value.message


def flatten(nodes: Any, depth: int = 0) -> list[tuple[int, str, str]]:
    out: list[tuple[int, str, str]] = []
    for node in nodes:
        out.append((depth, node.name, node.path))
        out.extend(flatten(node.children, depth + 1))
    return out


async def test_tree_nests_to_the_requested_depth(ws: Workspace) -> None:
    for path in ("MEMORY.md", "daily/2026-12-01.md", "notes/a/deep.md", "notes/top.md"):
        await ws.client.write_document(path, "x")

    async def tree(path: str = "", depth: int = 0) -> list[tuple[int, str, str]]:
        return flatten(await ws.client.memory_tree(path, depth=depth))

    assert await tree() == [
        (0, "MEMORY.md", "MEMORY.md"),
        (0, "daily/", "daily/"),
        (0, "notes/", "notes/"),
    ]
    assert await tree(depth=10) == [
        (0, "MEMORY.md", "MEMORY.md"),
        (0, "daily/", "daily/"),
        (1, "2026-12-01.md", "daily/2026-12-01.md"),
        (0, "notes/", "notes/"),
        (1, "a/", "notes/a/"),
        (2, "deep.md", "notes/a/deep.md"),
        (1, "top.md", "notes/top.md"),
    ]
    assert await tree(path="notes", depth=1) == [
        (0, "a/", "notes/a/"),
        (0, "top.md", "notes/top.md"),
    ]
    for depth in (-1, 11):
        with pytest.raises(InvalidArgument) as failure:
            await ws.client.memory_tree(depth=depth)
        assert "depth must be between 1 and 10" in failure.value.message
    with pytest.raises(InvalidArgument) as refused:
        await ws.client.memory_tree("notes/")
    assert 'use "notes"' in refused.value.message


# --- memory_search ------------------------------------------------------------------------------


async def search_until(ws: Workspace, query: str, path: str, limit: int = 0) -> Any:
    """Searches until `path` is found (the indexer runs behind the write), at most 60 s."""
    deadline = time.monotonic() + 60
    while True:
        response = await ws.client.memory_search(query, limit=limit)
        if any(hit.path == path for hit in response.results) or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.2)


async def test_search_finds_a_written_memory(ws: Workspace) -> None:
    await ws.write("The staging database password rotates every Tuesday.", target="memory")
    for n in range(7):
        await ws.write(f"note {n}: lunch order was pizza number {n}", target=f"n/{n}.md")
    await search_until(ws, "when does the staging password rotate", "MEMORY.md")
    assert await ws.engram.relay.drained(60), "the indexer did not take every write"
    response = await search_until(ws, "when does the staging password rotate", "MEMORY.md")
    assert response.query == "when does the staging password rotate"
    top = response.results[0]
    assert top.path == "MEMORY.md" and "Tuesday" in top.content
    assert top.document_id and 0 < top.score <= 1 and top.chunk_id
    assert response.result_count == len(response.results) == 5, "unset limit = 5"
    await search_until(ws, "lunch pizza", "n/6.md", limit=20)
    assert len((await ws.client.memory_search("pizza", limit=2)).results) == 2
    for limit in (-1, 21):
        with pytest.raises(InvalidArgument) as failure:
            await ws.client.memory_search("pizza", limit=limit)
        assert "limit must be between 1 and 20" in failure.value.message
    with pytest.raises(InvalidArgument):
        await ws.client.memory_search(" ")


# --- CompleteBootstrap --------------------------------------------------------------------------


async def bootstrap_updated_at(ws: Workspace) -> str:
    document = await ws.client.read_document("BOOTSTRAP.md")
    assert document.updated_at is not None
    return document.updated_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


async def test_complete_bootstrap_archives_once(ws: Workspace) -> None:
    await ws.client.write_document("BOOTSTRAP.md", "# Hello\nWho am I?\n")
    stamp = await bootstrap_updated_at(ws)
    archived = await ws.client.complete_bootstrap()
    assert archived == f"BOOTSTRAP.done-{stamp}.md"
    assert re.fullmatch(r"BOOTSTRAP\.done-\d{8}T\d{6}Z\.md", archived)
    assert await ws.read(archived) == "# Hello\nWho am I?\n"
    with pytest.raises(DocumentNotFound):
        await ws.read("BOOTSTRAP.md")
    with pytest.raises(NotFound) as again:
        await ws.client.complete_bootstrap()
    assert "BOOTSTRAP.md" in again.value.message


async def test_complete_bootstrap_finishes_after_a_crash_between_copy_and_delete(
    ws: Workspace,
) -> None:
    await ws.client.write_document("BOOTSTRAP.md", "onboard me\n")
    archive = f"BOOTSTRAP.done-{await bootstrap_updated_at(ws)}.md"
    # The state a crash after the create-only copy leaves behind.
    await ws.client.write_document(archive, "onboard me\n")
    assert await ws.client.complete_bootstrap() == archive
    with pytest.raises(DocumentNotFound):
        await ws.read("BOOTSTRAP.md")
    assert await ws.read(archive) == "onboard me\n"


# --- rate limits -------------------------------------------------------------------------------


async def fresh_minute() -> None:
    """Starts a burst early in a minute window, so it cannot straddle two."""
    into = time.time() % 60
    if into > 45:
        await asyncio.sleep(60 - into + 0.2)


async def test_the_21st_write_in_a_minute_is_refused_for_that_agent_only(ws: Workspace) -> None:
    await fresh_minute()
    for n in range(20):
        await ws.write(f"entry {n}")
    with pytest.raises(RateLimited) as failure:
        await ws.write("one too many")
    delay = failure.value.retry_after_seconds
    assert delay is not None and 1 <= int(delay) <= 60
    assert "ENGRAM_WORKSPACE_WRITES_PER_MINUTE" in failure.value.message
    # Every write tool counts, and a refused write changed nothing.
    with pytest.raises(RateLimited):
        await ws.client.append_daily_log("x")
    assert (await ws.read(TODAY_LOG)).count("] entry ") == 20
    # Another agent: the same caller in another space.
    assert (await ws.write("fine", space=Space(name="other-agent"))).path == TODAY_LOG
    # Reads are not writes.
    assert await ws.read(TODAY_LOG)


async def test_the_hour_limit_refuses_with_its_own_setting(tmp_path: Path) -> None:
    async with start_workspace(tmp_path, workspace_writes_per_hour=2) as small:
        await small.write("a")
        await small.write("b")
        with pytest.raises(RateLimited) as failure:
            await small.write("c")
        assert "ENGRAM_WORKSPACE_WRITES_PER_HOUR" in failure.value.message
        delay = failure.value.retry_after_seconds
        assert delay is not None and int(delay) >= 1


# --- heartbeat ---------------------------------------------------------------------------------


async def test_heartbeat_fields_render_and_keep_the_operators_lines(ws: Workspace) -> None:
    operator = "# Heartbeat\n\n## Schedule\n- 09:00 check mail\n<!-- keep me -->\n"
    await ws.client.write_document("HEARTBEAT.md", operator)
    beat = Heartbeat(
        last_seen=START,
        session_id="s-42",
        surface="cli",
        turn_count=7,
        open_loops=("ship the release",),
    )
    written = await ws.write("", target="heartbeat", heartbeat=beat)
    assert (written.path, written.append) == ("HEARTBEAT.md", False)
    text = await ws.read("HEARTBEAT.md")
    for expected in ("s-42", "cli", "7", "ship the release", "2026-12-01T10:15:00Z"):
        assert expected in text
    assert "## Schedule\n- 09:00 check mail\n<!-- keep me -->\n" in text
    beat = dataclasses.replace(beat, turn_count=8)
    await ws.write("all quiet", target="heartbeat", heartbeat=beat)
    again = await ws.read("HEARTBEAT.md")
    assert "turn_count: 8" in again and "turn_count: 7" not in again and "all quiet" in again
    assert again.count("## Schedule") == 1
    with pytest.raises(InvalidArgument):
        await ws.write("x", target="memory", heartbeat=beat)


# --- seeding, the system prompt, bootstrap ------------------------------------------------------

SEEDED = ["AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md", "BOOTSTRAP.md"]


async def seed(ws: Workspace) -> SeedResult:
    return await ws.client.seed_workspace()


async def test_seeding_twice_creates_nothing_and_keeps_edits(ws: Workspace) -> None:
    first = await seed(ws)
    assert list(first.created_paths) == SEEDED and not first.existing_paths
    memory = await ws.read("MEMORY.md")
    for heading in ("## Facts", "## Preferences", "## Decisions"):
        assert heading in memory
    with pytest.raises(DocumentNotFound):
        await ws.read("HEARTBEAT.md")
    await ws.client.write_document("SOUL.md", "edited by the operator")
    await ws.client.delete_document("USER.md")
    second = await seed(ws)
    assert list(second.created_paths) == ["USER.md"]
    assert list(second.existing_paths) == [p for p in SEEDED if p != "USER.md"]
    third = await seed(ws)
    assert not third.created_paths and list(third.existing_paths) == SEEDED
    assert await ws.read("SOUL.md") == "edited by the operator"


async def test_seed_templates_can_be_overridden_by_a_directory(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "SOUL.md").write_text("# Soul\nBe brief.\n")
    async with start_workspace(tmp_path, workspace_templates=templates) as custom:
        await seed(custom)
        assert await custom.read("SOUL.md") == "# Soul\nBe brief.\n"
        assert "## Facts" in await custom.read("MEMORY.md")


async def prompt(ws: Workspace, **options: Any) -> SystemPrompt:
    return await ws.client.system_prompt(**options)


SEED_FILES = {
    "AGENTS.md": "Follow the runbook.",
    "SOUL.md": "Be kind.",
    "USER.md": "Ann, SRE.",
    "IDENTITY.md": "I am Orbit.",
    "MEMORY.md": "Ann prefers tea.",
    "HEARTBEAT.md": "Open loop: the Apollo review.",
    "daily/2026-11-30.md": "yesterday's work",
}
SEED_004_ORDER = [
    ("Core Values", "SOUL.md", "Be kind."),
    ("Agent Instructions", "AGENTS.md", "Follow the runbook."),
    ("Identity", "IDENTITY.md", "I am Orbit."),
    ("User Context", "USER.md", "Ann, SRE."),
    ("Long-Term Memory", "MEMORY.md", "Ann prefers tea."),
    ("Heartbeat", "HEARTBEAT.md", "Open loop: the Apollo review."),
    ("Today's Notes", "daily/2026-12-01.md", "today's work"),
    ("Yesterday's Notes", "daily/2026-11-30.md", "yesterday's work"),
]


async def assert_seed_004_layout(answer: SystemPrompt) -> None:
    assert [(s.name, s.path) for s in answer.sections] == [
        (name, path) for name, path, _ in SEED_004_ORDER
    ]
    # Section by section: each heading, then its file's text, in this order.
    at = 0
    for name, _, text in SEED_004_ORDER:
        heading = answer.text.index(f"## {name}\n", at)
        at = answer.text.index(text, heading)


async def test_the_seed_004_layout_carries_heartbeat_in_its_order(ws: Workspace) -> None:
    for path, text in SEED_FILES.items():
        await ws.client.write_document(path, text)
    await ws.write("today's work")
    await assert_seed_004_layout(await prompt(ws, layout="004"))
    group = await prompt(ws, layout="004", group_context=True)
    assert "MEMORY.md" not in [s.path for s in group.sections]
    assert "HEARTBEAT.md" in [s.path for s in group.sections]
    # Seed 000's layout (the default here) is today's order, without HEARTBEAT.md.
    for answer in (await prompt(ws), await prompt(ws, layout="000")):
        assert [s.path for s in answer.sections][:5] == [
            "AGENTS.md",
            "SOUL.md",
            "USER.md",
            "IDENTITY.md",
            "MEMORY.md",
        ]
        assert "HEARTBEAT.md" not in [s.path for s in answer.sections]


async def test_a_deployment_may_default_to_the_seed_004_layout(tmp_path: Path) -> None:
    async with start_workspace(tmp_path, workspace_prompt_layout="004") as ws:
        for path, text in SEED_FILES.items():
            await ws.client.write_document(path, text)
        await ws.write("today's work")
        await assert_seed_004_layout(await prompt(ws))
        named = await prompt(ws, layout="000")
        assert named.sections[0].path == "AGENTS.md"


async def test_openclaw_journals_under_memory_reach_the_prompt(ws: Workspace) -> None:
    """Imported OpenClaw/Minara journals, memory/YYYY-MM-DD[-session].md, are daily logs of
    their day; other documents under memory/ are not."""
    files = {
        "memory/2026-12-01.md": "imported today",
        "memory/2026-12-01-telegram.md": "from telegram today",
        "memory/2026-11-30.md": "imported yesterday",
        "memory/2026-11-20.md": "too old",
        "memory/projects.md": "not a journal",
    }
    for path, text in files.items():
        await ws.client.write_document(path, text)
    await ws.write("today's work")
    sections = [(s.name, s.path) for s in (await prompt(ws)).sections]
    assert sections == [
        ("Today's Notes", "daily/2026-12-01.md"),
        ("Today's Notes", "memory/2026-12-01.md"),
        ("Today's Notes", "memory/2026-12-01-telegram.md"),
        ("Yesterday's Notes", "memory/2026-11-30.md"),
    ]


async def test_prompt_order_with_and_without_group_context(ws: Workspace) -> None:
    files = {
        "AGENTS.md": "Follow the runbook.",
        "SOUL.md": "Be kind.",
        "USER.md": "Ann, SRE.",
        "IDENTITY.md": "I am Orbit.",
        "MEMORY.md": "Ann prefers tea.",
        "daily/2026-11-30.md": "yesterday's work",
        "daily/2026-11-29.md": "too old",
        "notes/x.md": "not in the prompt",
    }
    for path, text in files.items():
        await ws.client.write_document(path, text)
    await ws.write("today's work")
    await ws.write("from the phone", session="phone")
    full = await prompt(ws)
    names = [(s.name, s.path) for s in full.sections]
    assert names == [
        ("Agent Instructions", "AGENTS.md"),
        ("Core Values", "SOUL.md"),
        ("User Context", "USER.md"),
        ("Identity", "IDENTITY.md"),
        ("Long-Term Memory", "MEMORY.md"),
        ("Today's Notes", "daily/2026-12-01.md"),
        ("Today's Notes", "daily/2026-12-01-phone.md"),
        ("Yesterday's Notes", "daily/2026-11-30.md"),
    ]
    headings = [line for line in full.text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Agent Instructions",
        "## Core Values",
        "## User Context",
        "## Identity",
        "## Long-Term Memory",
        "## Today's Notes",
        "## Yesterday's Notes",
    ]
    positions = [
        full.text.index(text)
        for text in (
            "Follow the runbook.",
            "Be kind.",
            "Ann, SRE.",
            "I am Orbit.",
            "Ann prefers tea.",
            "today's work",
            "from the phone",
            "yesterday's work",
        )
    ]
    assert positions == sorted(positions)
    assert "too old" not in full.text and "not in the prompt" not in full.text
    assert full.sections[1].sha256 == (await ws.client.memory_read("SOUL.md")).sha256
    assert not full.soul_changed and not full.bootstrapping
    group = await prompt(ws, group_context=True)
    assert "Long-Term Memory" not in group.text and "Ann prefers tea." not in group.text
    assert [s.path for s in group.sections] == [p for _, p in names if p != "MEMORY.md"]


async def test_notes_follow_the_callers_time_zone(ws: Workspace) -> None:
    # 10:15 UTC on Dec 1 is already Dec 2 in Kiritimati (UTC+14).
    await ws.write("kiritimati morning", time_zone="Pacific/Kiritimati")
    await ws.write("utc morning")
    there = await prompt(ws, time_zone="Pacific/Kiritimati")
    assert [(s.name, s.path) for s in there.sections] == [
        ("Today's Notes", "daily/2026-12-02.md"),
        ("Yesterday's Notes", "daily/2026-12-01.md"),
    ]


async def test_soul_notice_appears_exactly_once(ws: Workspace) -> None:
    await seed(ws)
    first = await prompt(ws)
    assert not first.soul_changed and "Notice" not in first.text
    assert not (await prompt(ws)).soul_changed
    await ws.client.write_document("SOUL.md", "Be bold.")
    changed = await prompt(ws)
    assert changed.soul_changed and "SOUL.md" in changed.text.split("## Agent Instructions")[0]
    after = await prompt(ws)
    assert not after.soul_changed and "Notice" not in after.text
    # The baseline is the agent's: another agent (another space) starts without a notice.
    other = await ws.client.system_prompt(space=Space(name="other-agent"))
    assert not other.soul_changed


async def test_bootstrap_block_until_completed(ws: Workspace) -> None:
    await seed(ws)
    onboarding = await prompt(ws)
    assert onboarding.bootstrapping and onboarding.sections[-1].path == "BOOTSTRAP.md"
    archived = await ws.client.complete_bootstrap()
    after = await prompt(ws)
    assert not after.bootstrapping and "BOOTSTRAP.md" not in [s.path for s in after.sections]
    assert archived not in after.text


async def test_racing_appends_keep_every_entry_and_one_header(ws: Workspace) -> None:
    await fresh_minute()
    # An operator's file without a final newline, and a log nobody has created yet.
    await ws.client.write_document("notes/raw.md", "head")
    await asyncio.gather(
        *(ws.write(f"entry {n}") for n in range(8)),
        *(ws.write(f"line {n}", target="notes/raw.md") for n in range(8)),
    )
    log = await ws.read(TODAY_LOG)
    assert log.count("# Daily Log") == 1
    assert sorted(log.splitlines()[2:]) == sorted(f"[10:15:00] entry {n}" for n in range(8))
    raw = (await ws.read("notes/raw.md")).splitlines()
    assert raw[0] == "head" and sorted(raw[1:]) == sorted(f"line {n}" for n in range(8))
