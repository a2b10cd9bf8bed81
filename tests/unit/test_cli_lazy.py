"""`engram <command>` imports and builds only the module of the command it runs: a behaviour
a user notices as start-up time (the figure itself is bench/cli_startup.py's)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import typer

from engram.cli.app import COMMAND_MODULES
from engram.cli.client import typer_app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("module", sorted(COMMAND_MODULES))
def test_the_table_names_what_each_module_registers(module: str) -> None:
    app = typer_app()
    importlib.import_module(f"engram.cli.{module}").register(app)
    assert tuple(typer.main.get_group(app).commands) == COMMAND_MODULES[module]


def test_a_command_loads_only_its_own_module() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from engram.cli.app import app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    app(['ls', '--help'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('engram.cli.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = {m.removeprefix("engram.cli.") for m in out.split()}
    assert loaded & set(COMMAND_MODULES) == {"storage_commands"}
