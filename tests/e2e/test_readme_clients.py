"""The Python examples of README.md's "Clients" section run as written, each as its own
script, against a fresh `engram dev` (ENGRAM_ADDR names it; no auth, so no token), and print
what the README says they print."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from engram.app.embedded import EmbeddedEngram
from tests.support.readme_commands import FENCE
from tests.support.scripts import ROOT

pytestmark = pytest.mark.e2e

README = ROOT / "README.md"


def section_python_blocks(markdown: str, heading: str) -> list[str]:
    """The ```python fences between `heading` and the next heading of its level."""
    level = heading.split(" ")[0]
    start = markdown.index(f"\n{heading}\n")
    following = re.search(rf"\n{level} ", markdown[start + 1 :])
    body = markdown[start : start + 1 + following.start()] if following else markdown[start:]
    blocks: list[str] = []
    current: list[str] | None = None
    for line in body.splitlines():
        fence = FENCE.match(line.strip())
        if current is None and fence and fence.group(1) == "python":
            current = []
        elif current is not None and fence and not fence.group(1):
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


async def run_script(code: str, addr: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "ENGRAM_ADDR": addr,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "services"), str(ROOT)]),
    }
    env.pop("ENGRAM_TOKEN", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 180)
    text = output.decode()
    assert process.returncode == 0, f"the README example failed:\n{code}\n---\n{text}"
    return text


def test_the_section_has_a_sync_and_an_async_example() -> None:
    blocks = section_python_blocks(README.read_text(encoding="utf-8"), "## Clients")
    assert len(blocks) == 2
    assert "with Client(" in blocks[0] and "async with AsyncClient(" in blocks[1]


async def test_the_python_examples_run_as_written(engram: EmbeddedEngram, tmp_path: Path) -> None:
    sync_example, async_example = section_python_blocks(
        README.read_text(encoding="utf-8"), "## Clients"
    )
    addr = f"127.0.0.1:{engram.port}"
    printed = await run_script(sync_example, addr, tmp_path)
    assert "refused:" in printed and "ETAG_MISMATCH" not in printed
    assert "MEMORY.md" in printed and "notes/plan.md" in printed
    assert re.search(r"\d\.\d\d MEMORY\.md: .*standup", printed), printed

    printed = await run_script(async_example, addr, tmp_path)
    lines = printed.splitlines()
    assert lines[0] == "notes/today.md"
    assert re.match(r"exported \d+ bytes, imported 3 documents", lines[1]), printed
    assert "written notes/today.md" in printed
    assert lines[-1] == "3 documents"
