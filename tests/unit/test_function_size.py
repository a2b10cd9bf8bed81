"""No function in services/engram runs over 80 lines (issue 30's code-health limit).

ruff checks complexity (C901) and statement counts (PLR0915) but has no rule for a function's
length, so this test does; `make lint` runs it beside ruff. A function longer than a screen
holds several ideas: split it by what each part does."""

import ast
from pathlib import Path

import pytest

MAX_LINES = 80
ROOT = Path(__file__).resolve().parents[2] / "services" / "engram"
# Generated protobuf code is not ours to shape.
GENERATED = ROOT / "v1"


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def long_functions(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """`path:line name (N lines)` for every function (decorators aside) over `max_lines`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(GENERATED):
            continue
        for function in _functions(ast.parse(path.read_text(), str(path))):
            assert function.end_lineno is not None
            lines = function.end_lineno - function.lineno + 1
            if lines > max_lines:
                found.append(f"{path}:{function.lineno} {function.name} ({lines} lines)")
    return found


def test_no_function_in_services_is_over_80_lines() -> None:
    assert long_functions(ROOT) == []


def test_a_long_function_is_found(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\nasync def long():\n{body}")
    assert long_functions(tmp_path) == [f"{tmp_path / 'm.py'}:5 long ({MAX_LINES + 1} lines)"]


@pytest.mark.parametrize("extra", [0, -1])
def test_a_function_at_the_limit_passes(tmp_path: Path, extra: int) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1 + extra))
    (tmp_path / "m.py").write_text(f"def fits():\n{body}")
    assert long_functions(tmp_path) == []
