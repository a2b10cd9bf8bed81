"""engram.client makes its result dataclasses when a call first returns one, not when it is
imported: each costs ~4 M instructions to create, and every `engram` command that
imported all forty paid for them (the CPU figure itself is bench/cli_startup.py's)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import engram.client

pytestmark = pytest.mark.unit

# The dataclasses of engram.client's modules loaded so far, by name.
_MADE = (
    "import dataclasses, sys\n"
    "def made():\n"
    "    return sorted(\n"
    "        value.__name__\n"
    "        for name, module in list(sys.modules.items())\n"
    "        if name.startswith('engram.client')\n"
    "        for value in vars(module).values()\n"
    "        if isinstance(value, type) and dataclasses.is_dataclass(value)\n"
    "        and value.__module__ == name\n"
    "    )\n"
)


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", _MADE + code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_a_client_before_its_first_call_makes_only_the_space() -> None:
    out = _run(
        "from engram.client import Client, Space\n"
        "client = Client('127.0.0.1:1', space=Space(name='notes'))\n"
        "print(' '.join(made()))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('engram.client.results'))))"
    )
    made, results = (out.split("\n") + [""])[:2]
    assert made.split() == ["Space"]
    assert results == ""


def test_naming_a_result_makes_only_its_family() -> None:
    out = _run("from engram.client import TokenInfo\nprint(' '.join(made()))")
    assert set(out.split()) == {
        "Space",
        "Principal",
        "Authorization",
        "CreatedToken",
        "TokenInfo",
        "AuditEvent",
    }


def test_a_command_s_help_makes_no_result() -> None:
    out = _run(
        "import contextlib, io\n"
        "from engram.cli.app import app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    app(['ls', '--help'])\n"
        "print(' '.join(made()))"
    )
    assert out == ""


def test_every_exported_name_resolves_and_is_listed() -> None:
    assert sorted(dir(engram.client)) == sorted({*dir(engram.client), *engram.client.__all__})
    for name in engram.client.__all__:
        assert getattr(engram.client, name) is not None, name
    with pytest.raises(AttributeError):
        engram.client.NoSuchName  # noqa: B018


def test_results_stay_frozen_slotted_dataclasses() -> None:
    from engram.client import DocumentPage, TokenInfo

    page = DocumentPage(entries=(), next_page_token="t")
    assert dataclasses.asdict(page) == {"entries": (), "next_page_token": "t"}
    assert dataclasses.replace(page, next_page_token="").next_page_token == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        page.next_page_token = "x"  # type: ignore[misc]
    assert "__slots__" in vars(TokenInfo) and "__dict__" not in vars(TokenInfo)
