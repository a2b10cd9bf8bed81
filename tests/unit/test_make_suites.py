"""`make test` runs the suites as three pytest sessions; a test directory in none would
silently never run in CI, and one in two would run twice."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_directory_is_in_one_of_make_s_sessions() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    groups = [
        set(re.search(rf"^{name} := (.+)$", makefile, re.M).group(1).split())  # type: ignore[union-attr]
        for name in ("SUITES_CONTRACT", "SUITES_E2E", "SUITES_SYSTEM")
    ]
    assert sum(len(group) for group in groups) == len(set().union(*groups)), (
        "a directory in two sessions runs twice"
    )
    with_tests = {
        f"tests/{directory.name}"
        for directory in (ROOT / "tests").iterdir()
        if directory.is_dir() and any(directory.rglob("test_*.py"))
    }
    assert with_tests == set().union(*groups)


def test_e2e_files_moved_to_the_contract_session_exist() -> None:
    """E2E_IN_CONTRACT runs some e2e files in the contract session (and --ignore's them in
    the e2e one): a renamed file would otherwise run in neither without a word."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^E2E_IN_CONTRACT := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert found is not None
    moved = found.group(1).replace("\\\n", " ").split()
    assert moved, "E2E_IN_CONTRACT is empty"
    for path in moved:
        assert path.startswith("tests/e2e/test_"), path
        assert (ROOT / path).is_file(), f"{path} is in E2E_IN_CONTRACT but does not exist"
