"""The CLI starts fast because its modules import nothing heavy: a behaviour guarded here
(the CPU figure itself is bench/cli_startup.py's)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ByteSize

from engram.runtime.sizes import format_size

pytestmark = pytest.mark.unit

# Packages no `engram --help` needs; each costs tens of milliseconds (or far more) to load.
HEAVY = (
    "grpc",
    "google.protobuf",
    "pydantic",
    "numpy",
    "onnxruntime",
    "pymongo",
    "nats",
    "tantivy",
    "asyncio",
    "markdown_it",
    "pygments",
    "rich",
    # concurrent.futures loads logging and queue: ~50 ms of CPU on a loaded 2-core machine.
    "concurrent.futures",
    "logging",
)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return set(out.split())


def test_importing_the_cli_loads_nothing_heavy() -> None:
    loaded = _modules_after("import engram.cli.app")
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert heavy == []


def test_help_loads_nothing_heavy() -> None:
    loaded = _modules_after(
        "import contextlib, io\n"
        "from engram.cli.app import app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    app(['--help'])"
    )
    assert sorted(m for m in loaded if m.startswith(HEAVY)) == []


@pytest.mark.parametrize(
    "size", [0, 1, 1023, 1024, 1536, 10**6, 2 * 1024**3, 2 * 10**9, 5 * 1024**5, 2**62]
)
def test_format_size_reads_like_pydantic(size: int) -> None:
    assert format_size(size) == ByteSize(size).human_readable(separator=" ")
