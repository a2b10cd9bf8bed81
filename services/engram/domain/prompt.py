"""The agent's system prompt, assembled from its workspace files. Pure: no I/O, no clock.

Two layouts (`PromptLayout`), seed 000's by default. Seed 004's puts the identity block first
(`## Core Values` SOUL.md, `## Agent Instructions` AGENTS.md, `## Identity` IDENTITY.md), then
the memory snapshot: `## User Context` USER.md, `## Long-Term Memory` MEMORY.md (not in a group
context), `## Heartbeat` HEARTBEAT.md, then the notes as below. Seed 000's sections, in this
order and only for files that exist and are not blank:
`## Agent Instructions` (AGENTS.md), `## Core Values` (SOUL.md), `## User Context` (USER.md),
`## Identity` (IDENTITY.md), `## Long-Term Memory` (MEMORY.md, never in a group context),
`## Today's Notes` and `## Yesterday's Notes` (the daily logs of both formats; each file under
a `### <path>` label, the day's shared log first, then session journals by session name),
then `## Onboarding (BOOTSTRAP.md)` while BOOTSTRAP.md exists. When SOUL.md changed since
the previous assembly for the agent, a `## Notice: SOUL.md Changed` block comes first.

Each file contributes at most `max_file_chars` characters (default 20,000): a longer one keeps
its head and its tail (a daily log's latest entries) around a line saying how much was left
out and to read the file with memory_read. Six files and four journals thus stay well under
the gRPC message size however large the documents grow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum

from engram.domain.workspace import parse_daily_log_path

AGENTS = "AGENTS.md"
SOUL = "SOUL.md"
USER = "USER.md"
IDENTITY = "IDENTITY.md"
MEMORY = "MEMORY.md"
HEARTBEAT = "HEARTBEAT.md"
BOOTSTRAP = "BOOTSTRAP.md"
IDENTITY_PATHS = (AGENTS, SOUL, USER, IDENTITY, MEMORY, HEARTBEAT, BOOTSTRAP)

TODAY_NOTES = "Today's Notes"
YESTERDAY_NOTES = "Yesterday's Notes"
ONBOARDING = "Onboarding (BOOTSTRAP.md)"
SOUL_NOTICE = "Notice: SOUL.md Changed"

DEFAULT_MAX_FILE_CHARS = 20_000
# Of a file over the cap: this share of it from the head, the rest from the tail.
_HEAD_SHARE = 0.7


class PromptLayout(StrEnum):
    """The order of the sections (the seeds disagree; a space picks one)."""

    # Seed 000: AGENTS, SOUL, USER, IDENTITY, MEMORY, then the logs (HEARTBEAT.md not read).
    SEED_000 = "000"
    # Seed 004: the identity block (SOUL, AGENTS, IDENTITY), then the memory snapshot: USER,
    # MEMORY, HEARTBEAT, then the recent journal entries.
    SEED_004 = "004"


HEARTBEAT_SECTION = "Heartbeat"
# The files before the logs, in prompt order, per layout: heading, file.
_FILE_SECTIONS = {
    PromptLayout.SEED_000: (
        ("Agent Instructions", AGENTS),
        ("Core Values", SOUL),
        ("User Context", USER),
        ("Identity", IDENTITY),
        ("Long-Term Memory", MEMORY),
    ),
    PromptLayout.SEED_004: (
        ("Core Values", SOUL),
        ("Agent Instructions", AGENTS),
        ("Identity", IDENTITY),
        ("User Context", USER),
        ("Long-Term Memory", MEMORY),
        (HEARTBEAT_SECTION, HEARTBEAT),
    ),
}


@dataclass(frozen=True, slots=True)
class PromptFile:
    """One stored file the prompt may include."""

    path: str
    content: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Section:
    """One file's part of the prompt; `name` is the heading without `## `."""

    name: str
    path: str
    sha256: str


@dataclass(frozen=True, slots=True)
class AssembledPrompt:
    text: str
    sections: list[Section]
    soul_changed: bool
    bootstrapping: bool


def soul_baseline(files: Mapping[str, PromptFile]) -> str:
    """What the agent's SOUL baseline records for these files: SOUL.md's sha256, "" without it."""
    soul = files.get(SOUL)
    return soul.sha256 if soul is not None else ""


def assemble_prompt(
    files: Mapping[str, PromptFile],
    daily_logs: Sequence[PromptFile],
    *,
    today: date,
    group_context: bool,
    previous_soul_sha256: str | None,
    max_file_chars: int = DEFAULT_MAX_FILE_CHARS,
    layout: PromptLayout = PromptLayout.SEED_000,
) -> AssembledPrompt:
    """The system prompt from whichever of IDENTITY_PATHS exist and the daily logs.

    `daily_logs` may hold any daily logs (both formats, any session, any day): only today's
    and yesterday's are used. `previous_soul_sha256` is the agent's stored baseline (see
    `soul_baseline`), None on the agent's first assembly, which never carries the notice.
    Sections' sha256 are the stored files', truncated or not.
    """

    def body(file: PromptFile) -> str:
        return _bounded(file.path, _body(file.content), max_file_chars)

    blocks: list[str] = []
    sections: list[Section] = []

    current_soul = soul_baseline(files)
    soul_changed = previous_soul_sha256 is not None and previous_soul_sha256 != current_soul
    if soul_changed:
        blocks.append(_block(SOUL_NOTICE, _soul_notice(previous_soul_sha256 or "", current_soul)))

    for name, path in _FILE_SECTIONS[layout]:
        if path == MEMORY and group_context:
            continue
        file = files.get(path)
        if file is not None and _body(file.content):
            blocks.append(_block(name, body(file)))
            sections.append(Section(name, path, file.sha256))

    for name, day in ((TODAY_NOTES, today), (YESTERDAY_NOTES, today - timedelta(days=1))):
        logs = _logs_of(day, daily_logs)
        if logs:
            labelled = "\n\n".join(f"### {log.path}\n\n{body(log)}" for log in logs)
            blocks.append(_block(name, labelled))
            sections.extend(Section(name, log.path, log.sha256) for log in logs)

    bootstrap = files.get(BOOTSTRAP)
    bootstrapping = bootstrap is not None and bool(_body(bootstrap.content))
    if bootstrap is not None and bootstrapping:
        blocks.append(_block(ONBOARDING, body(bootstrap)))
        sections.append(Section(ONBOARDING, BOOTSTRAP, bootstrap.sha256))

    text = "\n\n".join(blocks) + "\n" if blocks else ""
    return AssembledPrompt(text, sections, soul_changed, bootstrapping)


def _body(content: str) -> str:
    # Leading spaces of the first line may be Markdown (an indented code block): keep them.
    return content.strip("\r\n").rstrip()


def _bounded(path: str, text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = int(max_chars * _HEAD_SHARE)
    tail = max_chars - head
    left_out = len(text) - head - tail
    return (
        f"{text[:head]}\n\n[... {left_out} characters of {path} left out here; "
        f"read the whole file with memory_read ...]\n\n{text[len(text) - tail :]}"
    )


def _block(heading: str, body: str) -> str:
    return f"## {heading}\n\n{body}"


def _logs_of(day: date, daily_logs: Sequence[PromptFile]) -> list[PromptFile]:
    """The day's non-blank logs, once per path: the shared log, then journals by session."""
    found: dict[str, tuple[str, PromptFile]] = {}
    for log in daily_logs:
        parsed = parse_daily_log_path(log.path)
        if parsed is not None and parsed[0] == day and _body(log.content):
            found[log.path] = (parsed[1], log)
    return [log for _, log in sorted(found.values(), key=lambda pair: pair[0])]


def _soul_notice(previous: str, current: str) -> str:
    if not current:
        what = "SOUL.md, your core values file, was deleted"
    elif not previous:
        what = "SOUL.md, your core values file, was created"
    else:
        what = f"SOUL.md, your core values file, changed (sha256 {previous[:12]} -> {current[:12]})"
    return (
        f"{what} since your previous session. In your next reply, tell the operator that "
        "SOUL.md changed, so that an edit they did not make is noticed. This notice appears "
        "once."
    )
