"""The CLI's addressing (issue 30, seed 003): a bot or project space without --project takes
the current directory's project key, the same from anywhere in one git work tree, distinct
per checkout, always a valid space qualifier; `engram where` prints it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.cli.app import app
from engram.cli.client import SpaceFlags
from engram.cli.project_key import project_key, workspace_root
from engram.domain.spaces import SpaceRef, Visibility, validate_space_ref

pytestmark = pytest.mark.unit


def test_the_git_root_is_the_workspace_root_from_any_subdirectory(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    deep = root / "src" / "pkg"
    deep.mkdir(parents=True)
    assert workspace_root(deep) == workspace_root(root) == root.resolve()
    outside = tmp_path / "loose"
    outside.mkdir()
    assert workspace_root(outside) == outside.resolve()


def test_the_key_is_readable_distinct_per_checkout_and_a_valid_qualifier(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "my app: v2", tmp_path / "b" / "my app: v2"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    key = project_key(one)
    assert key.startswith("my-app--v2-") and len(key) == len("my-app--v2-") + 12
    assert key == project_key(one) != project_key(two)
    validate_space_ref(SpaceRef(Visibility.PROJECT, tenant="acme", name="notes", project=key))
    long = tmp_path / ("x" * 200)
    long.mkdir()
    assert len(project_key(long)) == 40 + 1 + 12


def test_project_spaces_default_to_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    key = project_key(tmp_path)
    assert SpaceFlags("project", "notes").project == key
    assert SpaceFlags("bot", "runs", bot="b1").label == f"bot:{key}/b1/runs"
    assert SpaceFlags("project", "notes", project="p1").project == "p1"
    assert SpaceFlags("private", "notes").project == ""


def test_where_prints_the_space_a_command_would_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    key = project_key(tmp_path)
    shown = CliRunner().invoke(app, ["-v", "project", "-n", "notes", "where", "--json"])
    assert shown.exit_code == 0, shown.output
    where = json.loads(shown.stdout)
    assert where["space"] == f"project:{key}/notes" and where["project_key"] == key
    assert where["workspace_root"] == str(tmp_path.resolve())
    text = CliRunner().invoke(app, ["where"]).stdout
    assert "private:default" in text and key in text
