"""`engram pull DIR` / `engram push DIR` and `engram import --skip-unsupported` against a
running all-in-one server: a space as files, etags kept, conflicts reported, files that
cannot be stored warned about one by one."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram
from engram.cli.app import app
from engram.cli.files_commands import STATE_FILE
from tests.conftest import EngramFactory

pytestmark = pytest.mark.e2e


class Cli:
    def __init__(self, port: int) -> None:
        self.addr = f"127.0.0.1:{port}"
        self.runner = CliRunner()

    async def run(self, *args: str, stdin: str | None = None) -> tuple[int, str]:
        result = await asyncio.to_thread(
            self.runner.invoke, app, [*args, "--addr", self.addr], input=stdin
        )
        text = result.output + (result.stderr if result.stderr_bytes else "")
        assert "Traceback" not in text, text
        assert result.exception is None or isinstance(result.exception, SystemExit), text
        return result.exit_code, text

    async def __call__(self, *args: str, stdin: str | None = None, code: int = 0) -> str:
        exit_code, text = await self.run(*args, stdin=stdin)
        assert exit_code == code, text
        return text

    async def json(self, *args: str, code: int = 0) -> dict[str, Any]:
        result = await asyncio.to_thread(
            self.runner.invoke, app, [*args, "--json", "--addr", self.addr]
        )
        assert result.exit_code == code, result.output
        document: dict[str, Any] = json.loads(result.stdout)
        return document


def actions(report: dict[str, Any]) -> dict[str, str]:
    return {entry["path"]: entry["action"] for entry in report["files"]}


@pytest.fixture
def cli(engram: EmbeddedEngram) -> Cli:
    return Cli(engram.port)


async def test_pull_edit_push_round_trip(cli: Cli, tmp_path: Path) -> None:
    await cli("write", "MEMORY.md", stdin="# Memory\n\nlikes tea\n")
    await cli("write", "notes/é.md", stdin="unicode path\n")
    work = tmp_path / "work"
    pulled = await cli.json("pull", str(work))
    assert pulled["ok"] is True and pulled["command"] == "pull"
    assert pulled["space"]["visibility"] == "private" and pulled["space"]["name"] == "default"
    assert actions(pulled) == {"MEMORY.md": "created", "notes/é.md": "created"}
    assert all(len(entry["sha256"]) == 64 and entry["version"] == 1 for entry in pulled["files"])
    assert (work / "MEMORY.md").read_text() == "# Memory\n\nlikes tea\n"
    assert (work / "notes" / "é.md").read_text() == "unicode path\n"
    state = json.loads((work / STATE_FILE).read_text())
    assert set(state["documents"]) == {"MEMORY.md", "notes/é.md"}

    (work / "MEMORY.md").write_text("# Memory\n\nlikes green tea\n")
    (work / "daily").mkdir()
    (work / "daily" / "2026-01-02.md").write_text("[09:00] new day\n")
    pushed = await cli.json("push", str(work))
    assert actions(pushed) == {
        "MEMORY.md": "updated",
        "daily/2026-01-02.md": "created",
        "notes/é.md": "unchanged",
    }
    assert pushed["counts"] == {"created": 1, "unchanged": 1, "updated": 1}
    assert await cli("read", "MEMORY.md") == "# Memory\n\nlikes green tea\n"
    assert await cli("read", "daily/2026-01-02.md") == "[09:00] new day\n"

    again = await cli("push", str(work))
    assert "3 unchanged" in again and "private:default" in again
    # A second pull changes nothing either.
    assert actions(await cli.json("pull", str(work))) == dict.fromkeys(
        ["MEMORY.md", "daily/2026-01-02.md", "notes/é.md"], "unchanged"
    )


async def test_a_conflicting_remote_edit_is_reported_not_overwritten(
    cli: Cli, tmp_path: Path
) -> None:
    await cli("write", "plan.md", stdin="v1\n")
    await cli("write", "other.md", stdin="other\n")
    work = tmp_path / "work"
    await cli("pull", str(work))
    await cli("write", "plan.md", stdin="edited in the space\n")
    (work / "plan.md").write_text("edited here\n")
    (work / "other.md").write_text("other, edited here\n")

    report = await cli.json("push", str(work), code=1)
    assert report["ok"] is False
    assert actions(report) == {"plan.md": "conflict", "other.md": "updated"}
    conflict = next(f for f in report["files"] if f["path"] == "plan.md")
    assert "changed in the space" in conflict["detail"] and conflict["version"] == 2
    assert await cli("read", "plan.md") == "edited in the space\n", "never overwritten"
    assert await cli("read", "other.md") == "other, edited here\n", "the rest went in"
    text = await cli("push", str(work), code=1)
    assert "conflict" in text and "plan.md" in text and "not everything went in" in text

    # Pull keeps the local edit too, until told otherwise.
    assert actions(await cli.json("pull", str(work), code=1))["plan.md"] == "conflict"
    assert (work / "plan.md").read_text() == "edited here\n"
    forced = await cli.json("pull", str(work), "--force")
    assert actions(forced)["plan.md"] == "updated"
    assert (work / "plan.md").read_text() == "edited in the space\n"
    assert (await cli.json("push", str(work)))["counts"] == {"unchanged": 2}


async def test_a_file_created_in_both_places_is_a_conflict_unless_equal(
    cli: Cli, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    await cli("pull", str(work))
    await cli("write", "same.md", stdin="same\n")
    await cli("write", "clash.md", stdin="theirs\n")
    (work / "same.md").write_text("same\n")
    (work / "clash.md").write_text("mine\n")
    report = await cli.json("push", str(work), code=1)
    assert actions(report) == {"same.md": "unchanged", "clash.md": "conflict"}
    assert await cli("read", "clash.md") == "theirs\n"
    forced = await cli.json("push", str(work), "--force")
    assert actions(forced)["clash.md"] == "updated"
    assert await cli("read", "clash.md") == "mine\n"


async def test_deletions_are_reported_then_performed_on_request(cli: Cli, tmp_path: Path) -> None:
    for doc in ("keep.md", "gone.md", "sub/remote-gone.md", "changed.md"):
        await cli("write", doc, stdin=f"{doc}\n")
    work = tmp_path / "work"
    await cli("pull", str(work))
    (work / "gone.md").unlink()
    (work / "changed.md").unlink()
    pending = await cli.json("push", str(work))
    assert pending["ok"] is True
    assert actions(pending)["gone.md"] == "pending_delete"
    assert await cli("read", "gone.md") == "gone.md\n", "not deleted without --delete"

    await cli("write", "changed.md", stdin="changed in the space\n")
    deleted = await cli.json("push", str(work), "--delete", code=1)
    assert actions(deleted)["gone.md"] == "deleted"
    assert actions(deleted)["changed.md"] == "conflict", "changed there: not deleted"
    assert "NOT_FOUND" in await cli("read", "gone.md", code=1)
    assert await cli("read", "changed.md") == "changed in the space\n"

    # Deleted in the space: pull removes the untouched local copy (and its empty directory).
    await cli("rm", "sub/remote-gone.md")
    pulled = await cli.json("pull", str(work), code=1)
    assert actions(pulled)["sub/remote-gone.md"] == "removed"
    assert not (work / "sub").exists()
    # Deleted here, changed there: both sides moved, so pull reports it and waits.
    assert actions(pulled)["changed.md"] == "conflict"
    assert not (work / "changed.md").exists()
    restored = await cli.json("pull", str(work), "--force")
    assert actions(restored)["changed.md"] == "created"
    assert (work / "changed.md").read_text() == "changed in the space\n"


async def test_files_that_cannot_be_stored_are_warned_about_one_by_one(
    engram_factory: EngramFactory, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "MEMORY.md").write_text("fine\n")
    (work / "avatar.png").write_bytes(b"\x89PNG\r\n")
    (work / "latin1.md").write_bytes(b"caf\xe9\n")
    (work / "huge.md").write_text("x" * 3000)
    (work / "secret.md").write_text("key AKIAQ3EGUK5EXAMPLE7Z\n")
    (work / "link.md").symlink_to(work / "MEMORY.md")
    (work / "linked-dir").symlink_to(tmp_path)
    (work / ".git").mkdir()
    (work / ".git" / "config").write_text("[core]\n")
    (work / "notes").mkdir()
    (work / "notes" / "fill.md").write_text("y" * 1500)
    (work / "notes" / "z-over-quota.md").write_text("z" * 1900)  # alone over the quota
    async with engram_factory(max_doc_bytes=2000, quota_private=1800) as engram:
        cli = Cli(engram.port)
        report = await cli.json("push", str(work), code=1)
        assert actions(report) == {
            "MEMORY.md": "created",
            "avatar.png": "unsupported",
            "latin1.md": "unsupported",
            "huge.md": "refused",
            "secret.md": "refused",
            "link.md": "unsupported",
            "linked-dir": "unsupported",
            "notes/fill.md": "created",
            "notes/z-over-quota.md": "refused",
        }
        detail = {entry["path"]: entry["detail"] for entry in report["files"]}
        assert "symbolic link" in detail["link.md"] and "Markdown" in detail["avatar.png"]
        assert "UTF-8" in detail["latin1.md"]
        assert "CONTENT_TOO_LARGE" in detail["huge.md"]
        assert "SECRET_IN_CONTENT" in detail["secret.md"] and "AKIA" not in detail["secret.md"]
        assert "RESOURCE_EXHAUSTED" in detail["notes/z-over-quota.md"]
        assert await cli("read", "notes/fill.md") == "y" * 1500 + "\n"
        text = await cli("push", str(work), code=1)
        assert "avatar.png" in text and "not everything went in" in text
        assert "[SECRET_IN_CONTENT]" in text, "the reason is printed, not taken for markup"
        listing = await cli("ls")
        assert "2 document(s)" in listing


async def test_push_to_a_named_space_and_the_directory_remembers_it(
    cli: Cli, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.md").write_text("bot memory\n")
    bot = ["-v", "bot", "--project", "p1", "--bot", "b1", "-n", "runs"]
    first = await cli.json("push", str(work), *bot)
    assert actions(first) == {"notes.md": "created"} and first["space"]["bot"] == "b1"
    assert await cli("read", "notes.md", *bot) == "bot memory\n"
    (work / "notes.md").write_text("bot memory, more\n")
    assert actions(await cli.json("push", str(work))) == {"notes.md": "updated"}
    assert await cli("read", "notes.md", *bot) == "bot memory, more\n"
    refused = await cli("push", str(work), "-n", "other", code=2)
    assert "holds space bot:runs" in refused
    # The environment's space default names a space as much as a flag does.
    from_env = await asyncio.to_thread(
        cli.runner.invoke, app, ["push", str(work), "--addr", cli.addr], env={"ENGRAM_SPACE": "x"}
    )
    assert from_env.exit_code == 2 and "holds space bot:runs" in from_env.output


async def test_a_push_cut_off_before_saving_its_state_resumes_cleanly(
    cli: Cli, tmp_path: Path
) -> None:
    await cli("write", "a.md", stdin="one\n")
    work = tmp_path / "work"
    await cli("pull", str(work))
    saved = (work / STATE_FILE).read_bytes()
    (work / "a.md").write_text("two\n")
    (work / "b.md").write_text("new\n")
    await cli("push", str(work))
    (work / STATE_FILE).write_bytes(saved)  # as if the push had died before saving
    report = await cli.json("push", str(work))
    assert actions(report) == {"a.md": "unchanged", "b.md": "unchanged"}
    assert json.loads((work / STATE_FILE).read_text())["documents"]["a.md"]["version"] == 2


async def test_dry_run_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.md").write_text("a\n")
    report = await cli.json("push", str(work), "--dry-run")
    assert actions(report) == {"a.md": "created"}
    assert "NOT_FOUND" in await cli("read", "a.md", code=1)
    assert not (work / STATE_FILE).exists()


async def test_pull_never_writes_through_a_symbolic_link(cli: Cli, tmp_path: Path) -> None:
    await cli("write", "notes/a.md", stdin="a\n")
    await cli("write", "b.md", stdin="b\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes").symlink_to(outside)
    report = await cli.json("pull", str(work), code=1)
    assert actions(report) == {"notes/a.md": "skipped", "b.md": "created"}
    assert list(outside.iterdir()) == []


async def test_unreachable_server_stops_at_once(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.md").write_text("a\n")
    code, text = await Cli(1).run("push", str(work))
    assert code == 1 and "UNAVAILABLE" in text


def tar_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def test_import_skip_unsupported(cli: Cli, tmp_path: Path) -> None:
    archive = tmp_path / "workspace.tar.gz"
    archive.write_bytes(
        tar_of(
            {
                "AGENTS.md": b"rules\n",
                "HEARTBEAT.md": b"- check mail\n",
                "BOOTSTRAP.md": b"hello, new agent\n",
                "memory/2026-01-01.md": b"day\n",
                "avatar.png": b"\x89PNG",
            }
        )
    )
    refused = await cli("import", "--in", str(archive), code=1)
    assert "nothing was imported" in refused
    imported = await cli("import", "--in", str(archive), "--skip-unsupported")
    assert "left out avatar.png: not a Markdown file" in imported
    assert await cli("read", "memory/2026-01-01.md") == "day\n"
    assert "left out BOOTSTRAP.md" in imported and "left out HEARTBEAT.md" in imported
    assert "NOT_FOUND" in await cli("read", "BOOTSTRAP.md", code=1)
