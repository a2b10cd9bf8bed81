"""Both journal layouts are daily logs: engram's `daily/` and OpenClaw/Minara's `memory/`
(`YYYY-MM-DD[-session].md`), for the prompt, dreaming, log retention and staleness alike."""

from __future__ import annotations

from datetime import date

import pytest

from engram.domain.dreaming import dream_logs
from engram.domain.hygiene import counts_for_staleness, daily_logs
from engram.domain.workspace import parse_daily_log_path

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("path", "parsed"),
    [
        ("daily/2026-03-01.md", (date(2026, 3, 1), "")),
        ("daily/2026-03-01-phone.md", (date(2026, 3, 1), "phone")),
        ("memory/2026-03-01.md", (date(2026, 3, 1), "")),
        ("memory/2026-03-01-telegram_2.md", (date(2026, 3, 1), "telegram_2")),
        ("memory/projects.md", None),
        ("memory/2026-13-01.md", None),
        ("notes/2026-03-01.md", None),
        ("memory/sub/2026-03-01.md", None),
        ("MEMORY.md", None),
    ],
)
def test_both_layouts_parse(path: str, parsed: tuple[date, str] | None) -> None:
    assert parse_daily_log_path(path) == parsed


def test_dreaming_and_retention_take_both_layouts() -> None:
    paths = [
        "memory/2026-03-02.md",
        "daily/2026-03-01-cli.md",
        "memory/notes.md",
        "daily/2026-03-01.md",
        "memory/2026-03-01-telegram.md",
    ]
    assert dream_logs(paths) == [
        "daily/2026-03-01.md",
        "daily/2026-03-01-cli.md",
        "memory/2026-03-01-telegram.md",
        "memory/2026-03-02.md",
    ]
    assert sorted(log.path for log in daily_logs(paths)) == sorted(
        p for p in paths if p != "memory/notes.md"
    )
    assert not counts_for_staleness("memory/2026-03-02.md")
    assert counts_for_staleness("memory/notes.md")
