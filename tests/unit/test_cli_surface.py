"""The CLI's surface without a server: --version, --help, shell completion, reading stdin,
the listing tree and the import counts."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from engram import __version__
from engram.cli import client
from engram.cli.app import app
from engram.cli.storage_commands import import_counts, tree_lines

pytestmark = pytest.mark.unit


def test_version_and_help_name_the_global_options() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["--version"]).stdout == f"engram {__version__}\n"
    shown = runner.invoke(app, ["--help"]).stdout
    for name in ("ENGRAM_ADDR", "ENGRAM_SPACE", "ENGRAM_VISIBILITY", "--json", "--version"):
        assert name in shown
    assert "--install-completion" in shown


def _complete(instruction: str, **variables: str) -> str:
    env = {**os.environ, "_ENGRAM_COMPLETE": instruction, **variables}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("engram"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout


def _candidates(words: str, cword: int) -> list[str]:
    return _complete("complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword)).split()


def test_shell_completion_offers_commands_and_options() -> None:
    assert "ls" in _candidates("engram l", 1)
    assert "--no-recursive" in _candidates("engram ls --no", 2)
    assert "list" in _candidates("engram token l", 2)
    # The script `--install-completion` writes for bash (named here: `--show-completion`
    # guesses the shell from the parent process, which a CI runner's may not be).
    assert "_engram_completion" in _complete("source_bash")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_reading_stdin_on_a_terminal_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    said = io.StringIO()
    monkeypatch.setattr(client, "err_console", _console(said))
    monkeypatch.setattr(sys, "stdin", Terminal("typed text\n"))
    assert client.read_input(None) == "typed text\n"
    assert "reading stdin" in said.getvalue() and "Ctrl-D" in said.getvalue()
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped"))
    said.truncate(0)
    assert client.read_input("-") == "piped"
    assert said.getvalue() == ""


def test_empty_input_is_refused_unless_allowed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    said = io.StringIO()
    monkeypatch.setattr(client, "err_console", _console(said))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(typer.Exit):
        client.read_input(None)
    assert "--allow-empty" in said.getvalue()
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert client.read_input(None, allow_empty=True) == ""


def _console(out: io.StringIO) -> object:
    from rich.console import Console

    return Console(file=out, width=80)


def test_listing_tree() -> None:
    entries = [
        SimpleNamespace(path="notes/a.md", is_dir=False, size_bytes=10),
        SimpleNamespace(path="notes/deep/b.md", is_dir=False, size_bytes=2048),
        SimpleNamespace(path="notes/empty", is_dir=True, size_bytes=0),
        SimpleNamespace(path="notes/z.md", is_dir=False, size_bytes=1),
    ]
    assert tree_lines("private:default/notes", "notes", entries) == [
        "private:default/notes",
        "├── a.md 10 B",
        "├── deep/",
        "│   └── b.md 2.0 KiB",
        "├── empty/",
        "└── z.md 1 B",
    ]


def test_import_counts_name_every_outcome() -> None:
    outcomes = ("created", "created", "unchanged", "skipped", "overwritten", "renamed")
    result = SimpleNamespace(
        entries=[SimpleNamespace(outcome=o) for o in (*outcomes, "unsupported", "unspecified")]
    )
    assert import_counts(result) == {
        "created": 2,
        "overwritten": 1,
        "skipped": 1,
        "renamed": 1,
        "unchanged": 1,
        "unsupported": 1,
        "unspecified": 1,
    }


def test_space_labels() -> None:
    assert client.SpaceFlags("bot", "runs", project="p1", bot="b1").label == "bot:p1/b1/runs"
    assert client.SpaceFlags("private", "default", tenant="acme").label == "private:default@acme"
    assert client.space_label("v1:user:acme:::ann:notes") == "user:ann/notes"


def test_progress_bars_draw_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from engram.cli import progress

    drawn = io.StringIO()
    monkeypatch.setattr(
        progress, "err_console", Console(file=drawn, force_terminal=True, width=100)
    )
    with progress.transfer_progress("importing into private:default", total=4096) as advance:
        advance(2048)
        advance(2048)
    with progress.count_progress("indexing", total=10) as update:
        update(4)
        update(10, total=10)
    text = drawn.getvalue()
    assert "importing into private:default" in text and "indexing" in text
    assert "10/10" in text
    quiet = io.StringIO()
    monkeypatch.setattr(progress, "err_console", Console(file=quiet, force_terminal=False))
    with progress.transfer_progress("exporting", total=None) as advance:
        advance(10)
    assert quiet.getvalue() == ""
