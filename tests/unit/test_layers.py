"""The layers and the absence of import cycles (`make lint` runs the same check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert contracts >= 3, "the layers, the acyclic and the client's forbidden contracts"
    assert f"{contracts} kept, 0 broken" in done.stdout
    assert "lint-imports" in (ROOT / "Makefile").read_text()
