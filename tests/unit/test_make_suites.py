"""`make test` runs the suites as two pytest sessions; a test directory in neither would
silently never run in CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_directory_is_in_one_of_make_s_sessions() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    groups = [
        set(re.search(rf"^{name} := (.+)$", makefile, re.M).group(1).split())  # type: ignore[union-attr]
        for name in ("SUITES_SERVICES", "SUITES_SYSTEM")
    ]
    assert not groups[0] & groups[1], "a directory in both sessions runs twice"
    with_tests = {
        f"tests/{directory.name}"
        for directory in (ROOT / "tests").iterdir()
        if directory.is_dir() and any(directory.rglob("test_*.py"))
    }
    assert with_tests == groups[0] | groups[1]
