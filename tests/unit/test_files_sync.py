"""`engram pull`/`push` decisions and the local directory scan (pure parts, no server)."""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

import pytest
import typer

from engram.cli.client import SpaceFlags
from engram.cli.files_commands import (
    STATE_FILE,
    SyncState,
    Tracked,
    blocked_by,
    load_state,
    pull_action,
    pull_gone_action,
    push_needed,
    read_markdown,
    resolve_space,
    save_state,
    scan,
)

pytestmark = pytest.mark.unit

A, B, C = "a" * 64, "b" * 64, "c" * 64


@pytest.mark.parametrize(
    ("local", "prior", "remote", "expected"),
    [
        (A, Tracked(A, 1), A, "unchanged"),
        (A, None, A, "unchanged"),  # an untracked file equal to the space's: adopted
        (None, None, A, "created"),
        (A, Tracked(A, 1), B, "updated"),  # untouched here, changed there
        (B, Tracked(A, 1), A, "conflict"),  # edited here; the space still has the pulled one
        (C, Tracked(A, 1), B, "conflict"),  # edited on both sides
        (B, None, A, "conflict"),  # an untracked local file in the way
        (None, Tracked(A, 1), A, "kept"),  # deleted here: not restored
        (None, Tracked(A, 1), B, "conflict"),  # deleted here, changed there
    ],
)
def test_pull_action(local: str | None, prior: Tracked | None, remote: str, expected: str) -> None:
    assert pull_action(local, prior, remote, force=False) == expected


def test_pull_force_takes_the_space_whatever_is_here() -> None:
    assert pull_action(C, Tracked(A, 1), B, force=True) == "updated"
    assert pull_action(None, Tracked(A, 1), B, force=True) == "created"
    assert pull_action(B, None, B, force=True) == "unchanged"


def test_pull_gone_action() -> None:
    assert pull_gone_action(A, Tracked(A, 1), force=False) == "removed"
    assert pull_gone_action(None, Tracked(A, 1), force=False) == "removed"
    assert pull_gone_action(B, Tracked(A, 1), force=False) == "conflict"
    assert pull_gone_action(B, Tracked(A, 1), force=True) == "removed"


def test_push_needed() -> None:
    assert not push_needed(A, Tracked(A, 3))
    assert push_needed(B, Tracked(A, 3))
    assert push_needed(A, None)


def test_scan_reports_what_cannot_be_pushed_and_follows_no_link(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("m")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("a")
    (tmp_path / "notes" / "photo.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / ".md").write_text("no name")
    (tmp_path / "link.md").symlink_to(tmp_path / "MEMORY.md")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret.md").write_text("s")
    (tmp_path / "elsewhere").symlink_to(outside)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / STATE_FILE).write_text("{}")
    nfd = unicodedata.normalize("NFD", "café.md")
    (tmp_path / nfd).write_text("c")
    found = scan(tmp_path)
    assert set(found.markdown) == {"MEMORY.md", "notes/a.md", "café.md"}
    unsupported = {result.path: result.detail for result in found.unsupported}
    assert set(unsupported) == {"notes/photo.jpg", ".md", "link.md", "elsewhere"}
    assert "symbolic link" in unsupported["link.md"]
    assert "directory: not followed" in unsupported["elsewhere"]


def test_read_markdown_refuses_what_is_not_utf8(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_bytes("é\n".encode())
    bad.write_bytes(b"caf\xe9")
    content = read_markdown(good)
    assert isinstance(content, tuple) and content[0] == "é\n"
    assert content[1] == hashlib.sha256("é\n".encode()).hexdigest()
    assert read_markdown(bad) == "not UTF-8 text (bad byte at offset 3)"


def test_blocked_by_names_a_link_or_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert blocked_by(tmp_path, "d/x/y.md") == ""
    (tmp_path / "f").write_text("")
    assert "f is a file here" in blocked_by(tmp_path, "f/y.md")
    (tmp_path / "l").symlink_to(tmp_path / "d")
    assert "l is a symbolic link here" in blocked_by(tmp_path, "l/y.md")
    (tmp_path / "t.md").symlink_to(tmp_path / "f")
    assert "symbolic link" in blocked_by(tmp_path, "t.md")


def test_state_round_trips(tmp_path: Path) -> None:
    state = SyncState(SpaceFlags("bot", "runs", project="p1", bot="b1"), {"a.md": Tracked(A, 4)})
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    assert load_state(tmp_path / "nowhere") is None
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE], "no temporary file left"


def test_resolve_space() -> None:
    pulled = SpaceFlags("bot", "runs", project="p1", bot="b1")
    defaults = SpaceFlags("private", "default")
    assert resolve_space(None, defaults, given=False) == defaults
    assert resolve_space(pulled, defaults, given=False) == pulled
    assert resolve_space(pulled, pulled, given=True) == pulled
    assert resolve_space(None, SpaceFlags("private", "n"), given=True) == SpaceFlags("private", "n")
    with pytest.raises(typer.Exit):
        resolve_space(pulled, SpaceFlags("bot", "other", project="p1", bot="b1"), given=True)
