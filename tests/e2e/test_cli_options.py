"""The CLI's shared behaviour against a running all-in-one server: global options and their
environment variables, --json (parsed), one-level listings, stdin/stdout archives, empty
input, and import counts that add up."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections.abc import Mapping
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from engram import __version__
from engram.app.embedded import EmbeddedEngram
from engram.cli.app import app

pytestmark = pytest.mark.e2e


class Cli:
    """Runs `engram ...` with the server's address given globally (before the command)."""

    def __init__(self, port: int) -> None:
        self.addr = f"127.0.0.1:{port}"
        self.runner = CliRunner()

    async def run(
        self,
        *args: str,
        stdin: str | bytes | None = None,
        ok: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        result = await asyncio.to_thread(
            self.runner.invoke, app, ["--addr", self.addr, *args], input=stdin, env=env
        )
        text = result.output + (result.stderr if result.stderr_bytes else "")
        assert "Traceback" not in text
        assert (result.exit_code == 0) == ok, text
        return result

    async def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        result = await self.run(*args, stdin=stdin, ok=ok)
        return result.output + (result.stderr if result.stderr_bytes else "")

    async def json(self, *args: str, stdin: str | None = None) -> Any:
        """The command's stdout parsed as one JSON document."""
        return json.loads((await self.run(*args, "--json", stdin=stdin)).stdout)


@pytest.fixture
def cli(engram: EmbeddedEngram) -> Cli:
    return Cli(engram.port)


def _archive(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"engram {__version__}"


async def test_space_options_before_the_command_reach_it(cli: Cli) -> None:
    # The README's line: the space given once, before the command.
    await cli(
        "-v",
        "bot",
        "--project",
        "p1",
        "--bot",
        "b1",
        "-n",
        "runs",
        "write",
        "r.md",
        stdin="run log",
    )
    listing = await cli("-v", "bot", "--project", "p1", "--bot", "b1", "-n", "runs", "ls")
    assert "bot:p1/b1/runs" in listing and "r.md" in listing
    # A command's own option wins over the global one.
    assert (
        await cli(
            "-n",
            "elsewhere",
            "read",
            "r.md",
            "-v",
            "bot",
            "--project",
            "p1",
            "--bot",
            "b1",
            "-n",
            "runs",
        )
        == "run log\n"
    )
    # The default space holds nothing of it.
    assert "0 document(s)" in await cli("ls")


async def test_environment_defaults_and_their_precedence(cli: Cli) -> None:
    env = {"ENGRAM_VISIBILITY": "project", "ENGRAM_PROJECT": "p9", "ENGRAM_SPACE": "team"}
    await cli.run("write", "t.md", stdin="team note", env=env)
    listed = json.loads((await cli.run("ls", "--json", env=env)).stdout)
    assert listed["space"] == "project:p9/team"
    assert [entry["path"] for entry in listed["entries"]] == ["t.md"]
    # A global option beats the environment, a command option beats both.
    beaten = json.loads((await cli.run("-n", "other", "ls", "--json", env=env)).stdout)
    assert beaten["space"] == "project:p9/other"
    own = json.loads((await cli.run("-n", "other", "ls", "-n", "team", "--json", env=env)).stdout)
    assert own["documents"] == 1
    # ENGRAM_ADDR reaches every command through the global --addr.
    result = await asyncio.to_thread(
        cli.runner.invoke, app, ["ls", "--json"], env={**env, "ENGRAM_ADDR": cli.addr}
    )
    assert result.exit_code == 0 and json.loads(result.stdout)["documents"] == 1


async def test_json_output_of_the_storage_commands(cli: Cli, tmp_path: Any) -> None:
    written = await cli.json("write", "notes/a.md", stdin="alpha beta")
    assert written["status"] == "created" and written["created"] is True
    assert written["path"] == "notes/a.md" and written["version"] == 1
    assert written["size_bytes"] == 10 and len(written["sha256"]) == 64
    again = await cli.json("write", "notes/a.md", stdin="alpha beta")
    assert again["status"] == "unchanged" and again["bytes_delta"] == 0
    read = await cli.json("read", "notes/a.md")
    assert read["content"] == "alpha beta" and read["word_count"] == 2
    assert read["updated_at"].endswith("Z")
    usage = await cli.json("du")
    assert usage["space"] == "private:default" and usage["document_count"] == 1
    history = await cli.json("history", "notes/a.md")
    assert [v["version"] for v in history["versions"]] == [1]
    assert history["versions"][0]["current"] is True
    # The global --json works as well as the command's own.
    globally = json.loads((await cli.run("--json", "du")).stdout)
    assert globally == usage
    assert written["position"] == {
        "space_id": written["space_id"],
        "path": "notes/a.md",
        "document_id": written["document_id"],
        "version": 1,
    }
    deleted = await cli.json("rm", "notes/a.md")
    assert deleted["deleted"] is True and deleted["deleted_bytes"] == 10
    assert deleted["position"]["path"] == "notes/a.md"


async def test_json_output_of_search_spaces_and_status(cli: Cli) -> None:
    await cli("write", "tea.md", stdin="green tea in the morning")
    found = await cli.json("search", "tea", "--mode", "lexical")
    assert found["query"] == "tea" and isinstance(found["results"], list)
    assert set(found) >= {"result_count", "degraded", "degraded_reasons"}
    spaces = await cli.json("spaces")
    assert any(s["space_id"].endswith(":default") for s in spaces["spaces"])
    status = await cli.json("index-status")
    assert isinstance(status["backlog"], int) and status["active_model"]
    tree = await cli.json("memory", "tree")
    assert tree["space"] == "private:default"
    assert [node["name"] for node in tree["nodes"]] == ["tea.md"]


async def test_ls_one_level_or_recursive(cli: Cli) -> None:
    for path in ("notes/a.md", "notes/deep/b.md", "top.md"):
        await cli("write", path, stdin=path)
    one = await cli.json("ls", "notes", "--no-recursive")
    assert one["recursive"] is False
    assert {(e["path"], e["is_dir"]) for e in one["entries"]} == {
        ("notes/a.md", False),
        ("notes/deep", True),
    }
    every = await cli.json("ls", "notes")
    assert {e["path"] for e in every["entries"] if not e["is_dir"]} == {
        "notes/a.md",
        "notes/deep/b.md",
    }
    text = await cli("ls", "--no-recursive")
    assert "top.md" in text and "notes/" in text and "a.md" not in text


async def test_write_refuses_empty_input_unless_allowed(cli: Cli) -> None:
    await cli("write", "keep.md", stdin="precious")
    refused = await cli("write", "keep.md", stdin="", ok=False)
    assert "empty" in refused and "--allow-empty" in refused
    assert await cli("read", "keep.md") == "precious\n"
    await cli("write", "keep.md", "--allow-empty", stdin="")
    assert (await cli.json("read", "keep.md"))["size_bytes"] == 0


async def test_export_to_stdout_and_import_from_stdin(cli: Cli) -> None:
    await cli("write", "a.md", stdin="one")
    await cli("write", "b/c.md", stdin="two")
    exported = await cli.run("export", "--out", "-")
    with tarfile.open(fileobj=io.BytesIO(exported.stdout_bytes)) as tar:
        assert sorted(tar.getnames()) == ["a.md", "b/c.md"]
    imported = json.loads(
        (
            await cli.run(
                "import", "--in", "-", "-n", "copy", "--json", stdin=exported.stdout_bytes
            )
        ).stdout
    )
    assert imported["created"] == 2 and imported["entries_total"] == 2
    assert await cli("read", "b/c.md", "-n", "copy") == "two\n"


async def test_import_counts_add_up_with_unchanged_entries(cli: Cli, tmp_path: Any) -> None:
    await cli("write", "same.md", stdin="same")
    await cli("write", "differs.md", stdin="old")
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_archive({"same.md": b"same", "differs.md": b"new", "fresh.md": b"fresh"}))
    skip = await cli.json("import", "--in", str(archive))
    counts = {k: skip[k] for k in ("created", "overwritten", "skipped", "renamed", "unchanged")}
    assert sum(counts.values()) == skip["entries_total"] == 3
    assert counts["created"] == 1 and counts["unchanged"] == 1 and counts["skipped"] == 1
    text = await cli("import", "--in", str(archive), "--strategy", "overwrite")
    assert "3 entries" in text and "unchanged" in text


async def test_reindex_waits_for_the_backlog_and_status_has_a_rate(cli: Cli) -> None:
    for n in range(30):
        await cli("write", f"doc-{n}.md", stdin=f"document number {n}")
    waited = await cli.json("reindex", "--space", "default", "--wait", "--timeout", "120")
    assert waited["documents_enqueued"] == 30
    assert waited["backlog"] == 0 and waited["seconds"] >= 0
    status = await cli.json("index-status", "--sample", "0.2")
    assert status["backlog"] == 0
    # The reindexed events were counted as indexed (besides the 30 writes).
    assert status["indexed_total"] >= 60
    assert status["rate_per_second"] is not None and status["rate_per_second"] >= 0
    text = await cli("reindex", "--space", "default", "--wait")
    assert "queued 30 documents" in text and "the backlog reached 0" in text
    shown = await cli("index-status", "--sample", "0.2")
    assert "backlog        0 events" in shown and "events/s" in shown
    assert "rate_per_second" in (await cli("index-status", "--json", "--sample", "0"))


async def test_history_fits_80_columns_with_whole_timestamps(cli: Cli) -> None:
    import re

    for n in range(3):
        await cli("write", "deep/path/to/a/long-document-name.md", stdin=f"version {n}")
    shown = await cli("history", "deep/path/to/a/long-document-name.md")
    lines = shown.splitlines()
    assert all(len(line) <= 80 for line in lines), shown
    stamps = [line for line in lines if re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line)]
    assert len(stamps) == 3, shown
    assert "private:default" in shown


async def test_json_output_of_memory_jobs_and_quota(cli: Cli) -> None:
    written = await cli.json("memory", "write", "likes green tea", "--target", "memory")
    assert written["path"] == "MEMORY.md" and written["version"] == 1
    assert written["space"] == "private:default"
    read = await cli.json("memory", "read", "MEMORY.md")
    assert "likes green tea" in read["content"] and read["updated_at"].endswith("Z")
    logged = await cli.json("memory", "log", "had a meeting")
    assert logged["path"].startswith("daily/")
    seeded = await cli.json("memory", "seed")
    assert isinstance(seeded["created_paths"], list) and seeded["created_paths"]
    prompt = await cli.json("memory", "prompt")
    assert "likes green tea" in prompt["text"] and prompt["sections"]
    found = await cli.json("memory", "search", "tea")
    assert found["query"] == "tea" and isinstance(found["results"], list)
    runs = await cli.json("jobs")
    assert isinstance(runs["runs"], list)
    settings = await cli.json("jobs", "settings")
    assert set(settings) >= {"dream_enabled", "log_retention", "max_daily_logs"}
    usage = await cli.json("quota", "show")
    assert usage["tenant"] == "local" and usage["used_bytes"] > 0
