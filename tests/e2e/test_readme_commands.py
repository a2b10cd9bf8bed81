"""Every `engram ...` line of README.md's ```bash fences runs, in README order, against a
fresh `engram dev` (its own data directory and port, default space, no auth) and exits 0.

Lines that start a server or need a cluster belong in ```text fences (shown, not run); a
test below refuses them in ```bash fences. `AWAITING` lists the lines that fail today because
the CLI they document is being built elsewhere (issue 17, part A): the test fails when one of
them starts to pass (remove it from the list) as well as when any other line fails.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram.app.embedded import EmbeddedEngram
from tests.support.readme_commands import (
    CommandLine,
    commands_of,
    engram_lines,
    fenced_lines,
    readme_engram_lines,
    starts_a_server,
)
from tests.support.scripts import ROOT

pytestmark = pytest.mark.e2e

README = ROOT / "README.md"
# One README command may take this long (an import, a reindex on a loaded machine).
COMMAND_SECONDS = 120
# `engram dev` starts (loads the model, opens the indexes) within this.
START_SECONDS = 180

# Lines (their text, without the comment) that fail until part A's CLI is merged, and why.
AWAITING: dict[str, str] = {}


@dataclass
class Outcome:
    command: CommandLine
    returncode: int
    output: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def fresh_dev(tmp_path: Path) -> Iterator[str]:
    """`engram dev` on its own data directory and port, no auth; yields its address."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram",
            "dev",
            "--port",
            str(port),
            "--metrics-port",
            "0",
            "--data-dir",
            str(tmp_path / "state"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + START_SECONDS
        line = process.stdout.readline()  # the first line says it is serving
        assert "serving on" in line and time.monotonic() < deadline, line
        yield f"127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _run_all(address: str, workdir: Path) -> list[Outcome]:
    engram = Path(sys.executable).parent / "engram"
    assert engram.exists(), "the engram console script sits next to the test's python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["PATH"] = f"{engram.parent}{os.pathsep}{env.get('PATH', '')}"
    env["ENGRAM_ADDR"] = address
    env["COLUMNS"] = "100"
    bash = shutil.which("bash")
    assert bash is not None
    outcomes = []
    for command in readme_engram_lines(README):
        if starts_a_server(command):
            continue  # refused by test_no_bash_fence_starts_a_server
        outcomes.append(_run(bash, command, workdir, env))
    return outcomes


def _run(bash: str, command: CommandLine, workdir: Path, env: dict[str, str]) -> Outcome:
    """Runs one line in its own process group, killed whole when it overruns."""
    process = subprocess.Popen(
        [bash, "-c", f"set -o pipefail\n{command.text}"],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=COMMAND_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n(killed after {COMMAND_SECONDS} s)"
    return Outcome(command, process.returncode, output)


def _key(command: CommandLine) -> str:
    """The command without its trailing comment, as AWAITING spells it."""
    return " ".join(" ".join(words) for words in commands_of(command.text))


# ~45 CLI processes one after the other, each starting Python: minutes on a busy machine.
@pytest.mark.timeout(900)
def test_every_readme_command_runs_against_a_fresh_engram_dev(
    fresh_dev: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    outcomes = _run_all(fresh_dev, workdir)
    assert outcomes, "README.md has engram commands in ```bash fences"
    failed = {_key(o.command): o for o in outcomes if o.returncode != 0}
    unexpected = [
        f"README.md:{o.command.line} ({o.command.section}): {o.command.text}\n"
        f"  exit {o.returncode}: {o.output.strip()[-600:]}"
        for key, o in failed.items()
        if key not in AWAITING
    ]
    fixed = [key for key in AWAITING if key not in failed]
    assert not unexpected, "README commands that fail:\n" + "\n".join(unexpected)
    assert not fixed, f"these now pass: remove them from AWAITING: {fixed}"


def test_no_bash_fence_starts_a_server() -> None:
    servers = [
        f"README.md:{line.line}: {line.text}"
        for line in readme_engram_lines(README)
        if starts_a_server(line)
    ]
    assert servers == [], "move these to a ```text fence: they start a server"


def test_no_engram_command_hides_in_an_unlabelled_fence() -> None:
    """A fence says whether its commands run (```bash) or are only shown (```text)."""
    unlabelled = [
        f"README.md:{line.line}: {line.text}"
        for line in fenced_lines(README.read_text(encoding="utf-8"), language="")
        if "engram" in line.text.split("#", 1)[0].split()
    ]
    assert unlabelled == [], "label these fences ```bash (run by the test) or ```text"


def test_the_extraction_finds_what_bash_would_run() -> None:
    markdown = "\n".join(
        [
            "## Try it",
            "```bash",
            "make install      # not engram",
            'echo "x" | engram write a.md   # a pipe into engram',
            "ENGRAM_ADDR=h:1 engram ls \\",
            "  --no-recursive",
            "# a comment line",
            "```",
            "```text",
            "engram dev",
            "```",
            "```",
            "engram watch",
            "```",
        ]
    )
    lines = engram_lines(markdown)
    assert [(line.line, line.section) for line in lines] == [(4, "Try it"), (5, "Try it")]
    assert lines[1].text == "ENGRAM_ADDR=h:1 engram ls --no-recursive"
    assert commands_of(lines[0].text) == [["echo", "x"], ["engram", "write", "a.md"]]
    assert [line.text for line in fenced_lines(markdown, "text")] == ["engram dev"]
    assert starts_a_server(CommandLine(1, "OTEL_X=1 engram serve storage", ""))
    assert starts_a_server(CommandLine(1, "engram watch --from-start", ""))
    assert not starts_a_server(CommandLine(1, "engram watch --count 2", ""))
    assert not starts_a_server(CommandLine(1, "engram -v bot --bot b ls", ""))


def integration_snippets(markdown: str) -> list[str]:
    """The README's ```python fences that use engram.integrations, each whole."""
    snippets: list[str] = []
    current: list[str] | None = None
    for raw in markdown.splitlines():
        if current is None:
            if raw.strip() == "```python":
                current = []
        elif raw.strip() == "```":
            if any("engram.integrations" in line for line in current):
                snippets.append("\n".join(current) + "\n")
            current = None
        else:
            current.append(raw)
    return snippets


async def test_the_integration_snippets_run(engram: EmbeddedEngram) -> None:
    """Each engram.integrations snippet runs as written, against a running engram."""
    snippets = integration_snippets(README.read_text(encoding="utf-8"))
    assert len(snippets) == 2, "README shows the Anthropic and LangGraph snippets"
    outputs = []
    for snippet in snippets:
        assert "127.0.0.1:50051" in snippet
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            snippet.replace("127.0.0.1:50051", f"127.0.0.1:{engram.port}"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(COMMAND_SECONDS):
            out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        outputs.append(out.decode())
    assert "/memories/prefs.md" in outputs[0]
    assert "('users', 'ann') prefs {'drink': 'green tea'}" in outputs[1]
