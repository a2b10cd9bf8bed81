"""Seed templates: the six defaults ship as package data, an override directory replaces them
per file, and every template must pass the document content rules."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engram.domain.content import check_text
from engram.domain.errors import Misconfigured
from engram.workspace.templates import SEED_PATHS, load_templates

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_defaults_are_the_six_seed_files_in_order() -> None:
    templates = load_templates(None)
    assert list(templates) == list(SEED_PATHS)
    assert SEED_PATHS == (
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "IDENTITY.md",
        "MEMORY.md",
        "BOOTSTRAP.md",
    )
    assert "HEARTBEAT.md" not in templates
    for path, text in templates.items():
        assert text.strip(), path
        check_text(text, what=path)
    memory = templates["MEMORY.md"].splitlines()
    headings = [line for line in memory if line.startswith("## ")]
    assert headings == ["## Facts", "## Preferences", "## Decisions"]
    assert "memory_search" in templates["AGENTS.md"]
    assert "CompleteBootstrap" in templates["BOOTSTRAP.md"]


def test_an_override_directory_replaces_defaults_per_file(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("# Our soul\n\nBe terse.\n")
    (tmp_path / "HEARTBEAT.md").write_text("# never seeded\n")
    (tmp_path / "notes.md").write_text("ignored\n")
    defaults = load_templates(None)
    templates = load_templates(tmp_path)
    assert list(templates) == list(SEED_PATHS)
    assert templates["SOUL.md"] == "# Our soul\n\nBe terse.\n"
    assert {path: text for path, text in templates.items() if path != "SOUL.md"} == {
        path: text for path, text in defaults.items() if path != "SOUL.md"
    }


def test_a_missing_override_directory_is_a_clear_misconfiguration(tmp_path: Path) -> None:
    with pytest.raises(Misconfigured, match="ENGRAM_WORKSPACE_TEMPLATES .* not a directory"):
        load_templates(tmp_path / "absent")


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"\xff\xfe not utf-8", "not valid UTF-8"),
        (b"token: ghp_" + b"a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "looks like it contains"),
        (b"nul \x00 byte", "NUL"),
    ],
)
def test_an_override_breaking_the_content_rules_is_refused(
    tmp_path: Path, content: bytes, complaint: str
) -> None:
    (tmp_path / "USER.md").write_bytes(content)
    with pytest.raises(Misconfigured, match=complaint) as refused:
        load_templates(tmp_path)
    assert "USER.md" in refused.value.message


def test_a_built_wheel_carries_the_templates(tmp_path: Path) -> None:
    # Built from a copy: setuptools leaves a build/ directory beside the sources.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "services",
        source / "services",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = tmp_path.glob("engram-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in SEED_PATHS:
        assert f"engram/workspace/templates/{path}" in names
