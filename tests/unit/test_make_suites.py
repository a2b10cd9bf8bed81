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


def _listed(makefile: str, name: str) -> list[str]:
    found = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert found is not None, name
    return found.group(1).replace("\\\n", " ").split()


def test_e2e_files_moved_to_other_sessions_exist_and_run_once() -> None:
    """E2E_IN_CONTRACT runs some e2e files in the contract session, E2E_SECOND others in a
    second e2e session (the first --ignore's both): a renamed file would otherwise run in
    none without a word, and a file in both lists would run twice."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    lists = {name: _listed(makefile, name) for name in ("E2E_IN_CONTRACT", "E2E_SECOND")}
    for name, moved in lists.items():
        assert moved, f"{name} is empty"
        assert len(set(moved)) == len(moved), f"{name} names a file twice"
        for path in moved:
            assert path.startswith("tests/e2e/test_"), path
            assert (ROOT / path).is_file(), f"{path} is in {name} but does not exist"
    assert not set(lists["E2E_IN_CONTRACT"]) & set(lists["E2E_SECOND"])
