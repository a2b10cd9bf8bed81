"""System prompt assembly: fixed order and headings, group context, both daily-log formats,
the one-time SOUL.md notice and the onboarding block."""

from __future__ import annotations

import hashlib
from datetime import date

import pytest

from engram.domain.prompt import (
    IDENTITY_PATHS,
    AssembledPrompt,
    PromptFile,
    Section,
    assemble_prompt,
    soul_baseline,
)

pytestmark = pytest.mark.unit

TODAY = date(2026, 12, 1)


def doc(path: str, content: str) -> PromptFile:
    return PromptFile(path, content, hashlib.sha256(content.encode()).hexdigest())


def identity(**overrides: str) -> dict[str, PromptFile]:
    contents = {path: f"text of {path}\n" for path in IDENTITY_PATHS if path != "BOOTSTRAP.md"}
    contents.update({path.replace("_", "."): text for path, text in overrides.items()})
    return {path: doc(path, text) for path, text in contents.items()}


def assemble(
    files: dict[str, PromptFile],
    logs: list[PromptFile] | None = None,
    *,
    group: bool = False,
    previous: str | None = None,
) -> AssembledPrompt:
    return assemble_prompt(
        files, logs or [], today=TODAY, group_context=group, previous_soul_sha256=previous
    )


def headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_sections_come_in_the_fixed_order_under_their_headings() -> None:
    logs = [doc("daily/2026-12-01.md", "today entry"), doc("daily/2026-11-30.md", "old entry")]
    prompt = assemble(identity(), logs)
    assert headings(prompt.text) == [
        "## Agent Instructions",
        "## Core Values",
        "## User Context",
        "## Identity",
        "## Long-Term Memory",
        "## Today's Notes",
        "## Yesterday's Notes",
    ]
    assert prompt.text.startswith("## Agent Instructions\n\ntext of AGENTS.md\n\n## Core Values")
    assert "### daily/2026-12-01.md\n\ntoday entry" in prompt.text
    assert prompt.text.index("today entry") < prompt.text.index("old entry")
    assert [(s.name, s.path) for s in prompt.sections] == [
        ("Agent Instructions", "AGENTS.md"),
        ("Core Values", "SOUL.md"),
        ("User Context", "USER.md"),
        ("Identity", "IDENTITY.md"),
        ("Long-Term Memory", "MEMORY.md"),
        ("Today's Notes", "daily/2026-12-01.md"),
        ("Yesterday's Notes", "daily/2026-11-30.md"),
    ]
    files = identity()
    assert prompt.sections[1] == Section("Core Values", "SOUL.md", files["SOUL.md"].sha256)
    assert not prompt.soul_changed and not prompt.bootstrapping


def test_group_context_never_carries_long_term_memory() -> None:
    prompt = assemble(identity(MEMORY_md="secret plans"), group=True)
    assert "## Long-Term Memory" not in prompt.text and "secret plans" not in prompt.text
    assert "MEMORY.md" not in [s.path for s in prompt.sections]
    assert headings(prompt.text)[-1] == "## Identity"


def test_missing_and_blank_files_have_no_section() -> None:
    files = identity(USER_md="  \n\n")
    del files["IDENTITY.md"]
    prompt = assemble(files, [doc("daily/2026-12-01.md", "\n")])
    assert headings(prompt.text) == [
        "## Agent Instructions",
        "## Core Values",
        "## Long-Term Memory",
    ]
    assert assemble({}).text == "" and assemble({}).sections == []


def test_session_journals_of_a_day_share_its_heading_in_a_stable_order() -> None:
    logs = [
        doc("daily/2026-12-01-web.md", "from web"),
        doc("daily/2026-12-01.md", "shared"),
        doc("daily/2026-12-01-cli.md", "from cli"),
        doc("daily/2026-11-30-cli.md", "yesterday cli"),
        doc("daily/2026-11-29.md", "too old"),
        doc("daily/2026-12-02.md", "tomorrow"),
        doc("notes/2026-12-01.md", "not a daily log"),
    ]
    prompt = assemble({}, logs)
    assert headings(prompt.text) == ["## Today's Notes", "## Yesterday's Notes"]
    order = [prompt.text.index(text) for text in ("shared", "from cli", "from web", "yesterday")]
    assert order == sorted(order)
    for absent in ("too old", "tomorrow", "not a daily log"):
        assert absent not in prompt.text
    assert [s.path for s in prompt.sections] == [
        "daily/2026-12-01.md",
        "daily/2026-12-01-cli.md",
        "daily/2026-12-01-web.md",
        "daily/2026-11-30-cli.md",
    ]
    assert assemble({}, list(reversed(logs))).text == prompt.text


def test_yesterday_crosses_month_and_year_boundaries() -> None:
    prompt = assemble_prompt(
        {},
        [doc("daily/2026-12-31.md", "new year's eve")],
        today=date(2027, 1, 1),
        group_context=False,
        previous_soul_sha256=None,
    )
    assert headings(prompt.text) == ["## Yesterday's Notes"]


def test_soul_notice_only_when_the_baseline_differs() -> None:
    files = identity()
    current = soul_baseline(files)
    assert current == files["SOUL.md"].sha256
    first = assemble(files, previous=None)
    same = assemble(files, previous=current)
    assert not first.soul_changed and not same.soul_changed
    assert "SOUL.md Changed" not in first.text + same.text

    changed = assemble(files, previous="0" * 64)
    assert changed.soul_changed
    assert headings(changed.text)[0] == "## Notice: SOUL.md Changed", "the notice comes first"
    assert "tell the operator" in changed.text and "changed" in changed.text
    assert "Notice" not in [s.name for s in changed.sections]


def test_soul_notice_says_when_soul_was_deleted_or_created() -> None:
    files = identity()
    without = {path: file for path, file in files.items() if path != "SOUL.md"}
    assert soul_baseline(without) == ""
    deleted = assemble(without, previous=files["SOUL.md"].sha256)
    assert deleted.soul_changed and "was deleted" in deleted.text
    created = assemble(files, previous="")
    assert created.soul_changed and "was created" in created.text
    assert not assemble(without, previous="").soul_changed


def test_bootstrap_follows_as_onboarding_while_it_exists() -> None:
    files = identity(BOOTSTRAP_md="Ask the user's name.\n")
    prompt = assemble(files, [doc("daily/2026-12-01.md", "entry")])
    assert prompt.bootstrapping
    assert headings(prompt.text)[-1] == "## Onboarding (BOOTSTRAP.md)"
    assert prompt.text.endswith("## Onboarding (BOOTSTRAP.md)\n\nAsk the user's name.\n")
    assert prompt.sections[-1].path == "BOOTSTRAP.md"
    assert not assemble(identity(BOOTSTRAP_md="\n")).bootstrapping


def test_file_text_is_kept_verbatim_inside_its_section() -> None:
    body = "    indented code\n\n# Title inside\n- item"
    prompt = assemble({"AGENTS.md": doc("AGENTS.md", f"\n{body}\n\n")})
    assert prompt.text == f"## Agent Instructions\n\n{body}\n"


def test_a_file_over_the_cap_keeps_its_head_and_latest_tail() -> None:
    log = "\n".join(f"[10:{n // 60:02d}:{n % 60:02d}] entry {n}" for n in range(2000))
    prompt = assemble_prompt(
        {},
        [doc("daily/2026-12-01.md", log)],
        today=TODAY,
        group_context=False,
        previous_soul_sha256=None,
        max_file_chars=1000,
    )
    body = prompt.text.split("### daily/2026-12-01.md\n\n", 1)[1]
    assert len(body) < 1200
    assert body.startswith("[10:00:00] entry 0\n")
    assert body.endswith("entry 1999\n"), "the latest entries survive"
    assert "characters of daily/2026-12-01.md left out here" in body
    assert "memory_read" in body
    assert prompt.sections[0].sha256 == doc("x", log).sha256
