"""`engram memory ...` against a running all-in-one server: every subcommand, and a refused
protected-file write reported as the server's message."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram
from engram.cli.app import app
from tests.e2e.test_cli import Cli

pytestmark = pytest.mark.e2e

TEMPLATES = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md", "BOOTSTRAP.md")
HEADINGS = (
    "## Agent Instructions",
    "## Core Values",
    "## User Context",
    "## Identity",
    "## Long-Term Memory",
    "## Today's Notes",
)
INDEX_WAIT_SECONDS = 60.0


@pytest.fixture
def cli(engram: EmbeddedEngram) -> Cli:
    return Cli(engram.port)


async def test_seed_creates_templates_once(cli: Cli) -> None:
    first = await cli("memory", "seed")
    for path in TEMPLATES:
        assert f"created {path}" in first
    assert "HEARTBEAT.md" not in first
    assert "6 created, 0 left alone" in first
    await cli("memory", "write", "likes tea", "--target", "memory")
    second = await cli("memory", "seed")
    assert "created" not in second.replace("0 created", "")
    assert "exists  MEMORY.md" in second and "0 created, 6 left alone" in second
    assert "likes tea" in await cli("memory", "read", "MEMORY.md"), "seeding kept the edit"


async def test_write_targets_read_and_tree(cli: Cli) -> None:
    written = await cli("memory", "write", "likes tea", "--target", "memory")
    assert "written: appended to MEMORY.md v1" in written
    assert "likes tea" in await cli("memory", "read", "MEMORY.md")
    await cli("memory", "write", "-", "--target", "notes/project.md", stdin="# Project\n\nv1")
    replaced = await cli(
        "memory", "write", "# Project\n\nv2", "--target", "notes/project.md", "--replace"
    )
    assert "replaced notes/project.md v2" in replaced
    assert await cli("memory", "read", "notes/project.md") == "# Project\n\nv2\n"
    today = datetime.now(UTC).date().isoformat()
    logged = await cli("memory", "write", "deployed the fix")
    assert f"appended to daily/{today}.md" in logged
    log_text = await cli("memory", "read", f"daily/{today}.md")
    assert log_text.startswith(f"# Daily Log - {today}\n")
    assert re.search(r"^\[\d\d:\d\d:\d\d\] deployed the fix$", log_text, re.MULTILINE)
    await cli("memory", "write", "ok", "--target", "heartbeat")
    assert "ok" in await cli("memory", "read", "HEARTBEAT.md")
    top = await cli("memory", "tree")
    assert "MEMORY.md" in top and "daily/" in top and "notes/" in top
    assert "project.md" not in top, "depth 1 lists the root's children only"
    deep = await cli("memory", "tree", "--depth", "2")
    assert "project.md" in deep and f"{today}.md" in deep
    under = await cli("memory", "tree", "--path", "notes")
    assert "project.md" in under and "MEMORY.md" not in under
    missing = await cli("memory", "read", "nope.md", ok=False)
    assert "NOT_FOUND" in missing and "nope.md" in missing


async def test_log_appends_in_the_time_zone_and_session(cli: Cli) -> None:
    zone = "Pacific/Kiritimati"  # UTC+14: its date differs from UTC's for 14 h a day
    day = datetime.now(ZoneInfo(zone)).date().isoformat()
    logged = await cli("memory", "log", "standup", "--tz", zone, "--session", "cli")
    assert f"appended to daily/{day}-cli.md v1" in logged
    again = await cli("memory", "log", "-", "--tz", zone, "--session", "cli", stdin="retro")
    assert f"daily/{day}-cli.md v2" in again
    text = await cli("memory", "read", f"daily/{day}-cli.md")
    assert re.search(r"\] standup\n\[\d\d:\d\d:\d\d\] retro", text), text
    refused = await cli("memory", "log", "x", "--tz", "Mars/Olympus", ok=False)
    assert "INVALID_ARGUMENT" in refused and "Mars/Olympus" in refused


async def test_search_finds_a_written_fact(cli: Cli) -> None:
    await cli(
        "memory",
        "write",
        "Deploys go out on Tuesdays; ERR_4021 means the cache volume is full.",
        "--target",
        "memory",
    )
    deadline = time.monotonic() + INDEX_WAIT_SECONDS
    found = ""
    while time.monotonic() < deadline:
        found = await cli("memory", "search", "ERR_4021", "--limit", "3")
        if "MEMORY.md" in found:
            break
        await asyncio.sleep(0.1)
    assert "MEMORY.md" in found and "result(s) for 'ERR_4021'" in found, found
    refused = await cli("memory", "search", "x", "--limit", "21", ok=False)
    assert "INVALID_ARGUMENT" in refused and "limit" in refused


async def test_prompt_sections_and_bootstrap_done(cli: Cli) -> None:
    await cli("memory", "seed")
    await cli("memory", "write", "likes tea", "--target", "memory")
    await cli("memory", "log", "started")
    prompt = await cli("memory", "prompt")
    positions = [prompt.index(heading) for heading in HEADINGS]
    assert positions == sorted(positions), prompt
    assert "likes tea" in prompt and "started" in prompt
    group = await cli("memory", "prompt", "--group", "--tz", "Europe/Berlin")
    assert "## Long-Term Memory" not in group and "likes tea" not in group
    assert "## Agent Instructions" in group
    sections = await cli("memory", "prompt", "--sections")
    agents = await cli("read", "AGENTS.md")
    assert hashlib.sha256(agents.encode()).hexdigest() in sections or (
        hashlib.sha256(agents.rstrip("\n").encode()).hexdigest() in sections
    ), "each section carries the sha256 of its file"
    assert "Agent Instructions" in sections and "bootstrapping" in sections
    done = await cli("memory", "bootstrap-done")
    assert re.search(r"archived BOOTSTRAP\.md as BOOTSTRAP\.done-\S+\.md", done), done
    assert "bootstrapping" not in await cli("memory", "prompt", "--sections")
    again = await cli("memory", "bootstrap-done", ok=False)
    assert "NOT_FOUND" in again


async def test_protected_file_write_prints_the_server_message(engram: EmbeddedEngram) -> None:
    addr = f"127.0.0.1:{engram.port}"
    for extra in ((), ("--replace",)):
        result = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["memory", "write", "be evil", "--target", "SOUL.md", *extra, "--addr", addr],
        )
        text = result.output + (result.stderr if result.stderr_bytes else "")
        assert result.exit_code == 1, text
        assert "Traceback" not in text and isinstance(result.exception, SystemExit), text
        assert "PERMISSION_DENIED" in text and "[PROTECTED_FILE]" in text and "SOUL.md" in text
    assert "NOT_FOUND" in await Cli(engram.port)("memory", "read", "SOUL.md", ok=False)


async def test_unreachable_server_is_explained() -> None:
    text = await Cli(1)("memory", "read", "MEMORY.md", ok=False)
    assert "UNAVAILABLE" in text and "is the server running" in text
