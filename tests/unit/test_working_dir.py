"""A server started where it cannot stay (a removed directory) moves to / before it starts
any process of its own; one whose directory is fine stays. (A directory its user cannot
enter is covered by deploy/local/install-check.sh, which runs engram as nobody.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from engram.runtime.settings import Settings
    from engram.runtime.working_dir import leave_unenterable_working_dir

    os.chdir(sys.argv[1])
    if sys.argv[2] == "remove":
        os.rmdir(sys.argv[1])
    settings = leave_unenterable_working_dir(Settings())
    print(os.getcwd(), settings.data_dir)
    """
)


def run(directory: Path, how: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory), how],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
    )
    return result.stdout.strip()


def test_a_removed_working_directory_is_left_for_the_root(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    assert run(gone, "remove").split()[0] == "/"


def test_a_working_directory_that_can_be_entered_is_kept(tmp_path: Path) -> None:
    assert run(tmp_path, "keep") == f"{tmp_path} .engram"
