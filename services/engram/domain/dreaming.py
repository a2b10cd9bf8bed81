"""Dreaming's rules: which daily logs are read, what part of each is new, what the model is
sent, how its answer is checked, and the section appended to MEMORY.md. Pure: no I/O.

Daily logs grow by appends. A space's watermark records, per log, how much of it was
already sent to the model (a length in characters and the sha256 of that prefix), so each
run sends only the new tail of each log: nothing is skipped and nothing repeated. A log
whose start no longer matches its mark was rewritten, and is sent again from the start.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

from engram.domain.errors import Unavailable
from engram.domain.workspace import parse_daily_log_path

# The model's literal answer when the logs hold nothing worth keeping.
NOTHING_TO_PROMOTE = "NOTHING_TO_PROMOTE"
SECTION_TITLE = "## Dreamed"
# Written under each Dreamed heading: the key of the input it came from, so a run that
# stopped between the write and the watermark is recognised and not written twice.
MARKER_PREFIX = "<!-- engram-dream "
MARKER_SUFFIX = " -->"
KEY_HEX_CHARS = 24


class ModelUnavailable(Unavailable):
    """The chat model could not be reached or failed; the run retries next time."""

    reason = "MODEL_UNAVAILABLE"


class UnusableAnswer(Unavailable):
    """The chat model answered something dreaming cannot append (empty, cut at the token
    limit, over the size limit); nothing is written and the logs are sent again."""

    reason = "MODEL_ANSWER_UNUSABLE"


@dataclass(frozen=True, slots=True)
class LogMark:
    """How much of one daily log the model has seen."""

    length: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Watermark:
    """A space's marks, one per daily log, and the generation the store compares on."""

    generation: int = 0
    logs: Mapping[str, LogMark] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogExcerpt:
    """The part of one log sent in this run: `text` starts at character `start`."""

    path: str
    start: int
    text: str
    # The log no longer starts with what was sent before: it is sent from its start.
    rewritten: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A versioned prompt: a system message and a user message, `$memory`, `$logs` and
    `$today` substituted into the user message."""

    version: str
    system: str
    user: str


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dream_logs(paths: Iterable[str]) -> list[str]:
    """The daily logs among `paths`, oldest day first (a day's own log before its session
    logs)."""
    dated = []
    for path in paths:
        parsed = parse_daily_log_path(path)
        if parsed is not None:
            dated.append((parsed[0], parsed[1], path))
    return [path for _, _, path in sorted(dated)]


@dataclass(frozen=True, slots=True)
class Excerpted:
    """What one log gives a run: its new part (None when nothing is sent), its mark once
    that is sent, and whether the log is then sent to its end (False: the budget ran out)."""

    excerpt: LogExcerpt | None
    mark: LogMark | None
    complete: bool


def take_excerpt(
    path: str, content: str, mark: LogMark | None, budget: int, *, split_line: bool = True
) -> Excerpted:
    """The new part of one log, at most `budget` characters.

    A cut tail ends at the last line break inside the budget, so the model sees whole
    entries and the next run continues at a line start. Only a line longer than the budget
    is cut inside, and only with `split_line` (the run's first excerpt: otherwise the line
    waits for a run with the whole budget).
    """
    start = 0
    rewritten = False
    if mark is not None:
        if mark.length <= len(content) and text_sha256(content[: mark.length]) == mark.sha256:
            start = mark.length
        else:
            rewritten = True
    tail = content[start:]
    if not tail:
        return Excerpted(None, mark, complete=True)
    if len(tail) > budget:
        cut = tail.rfind("\n", 0, max(budget, 0))
        if cut < 0 and (budget <= 0 or not split_line):
            return Excerpted(None, mark, complete=False)
        tail = tail[: cut + 1] if cut >= 0 else tail[:budget]
    end = start + len(tail)
    return Excerpted(
        LogExcerpt(path=path, start=start, text=tail, rewritten=rewritten),
        LogMark(length=end, sha256=text_sha256(content[:end])),
        complete=end == len(content),
    )


def dream_key(excerpts: Iterable[LogExcerpt]) -> str:
    """Identifies one run's input: the same logs at the same offsets give the same key."""
    digest = hashlib.sha256()
    for excerpt in excerpts:
        for part in (excerpt.path, str(excerpt.start), text_sha256(excerpt.text)):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
    return digest.hexdigest()[:KEY_HEX_CHARS]


def marker(key: str, version: str) -> str:
    return f"{MARKER_PREFIX}{version} {key}{MARKER_SUFFIX}"


def already_dreamed(memory: str, key: str, version: str) -> bool:
    """Whether MEMORY.md already holds the section written for this input."""
    return marker(key, version) in memory


def render_logs(excerpts: Iterable[LogExcerpt]) -> str:
    """The excerpts as the model reads them: one block per log, saying where it starts."""
    blocks = []
    for excerpt in excerpts:
        where = "from its start" if excerpt.start == 0 else f"continued at {excerpt.start}"
        if excerpt.rewritten:
            where = "rewritten since it was last read; from its start"
        blocks.append(f"### {excerpt.path} ({where})\n\n{excerpt.text.rstrip()}\n")
    return "\n".join(blocks)


def memory_excerpt(memory: str, max_chars: int) -> str:
    """MEMORY.md as the model reads it: whole, or its last `max_chars` characters from a
    line start (the newest sections, the likeliest to be repeated) after a note."""
    text = memory.strip()
    if len(text) <= max_chars:
        return text or "(MEMORY.md is empty)"
    tail = text[-max_chars:]
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return f"(the first {len(text) - len(tail)} characters are left out)\n{tail}"


def render_prompt(
    template: PromptTemplate,
    *,
    memory: str,
    excerpts: Iterable[LogExcerpt],
    today: date,
    max_memory_chars: int,
) -> tuple[str, str]:
    """(system, user) messages of one run."""
    user = string.Template(template.user).safe_substitute(
        memory=memory_excerpt(memory, max_memory_chars),
        logs=render_logs(excerpts),
        today=today.isoformat(),
        nothing=NOTHING_TO_PROMOTE,
    )
    system = string.Template(template.system).safe_substitute(nothing=NOTHING_TO_PROMOTE)
    return system, user


def parse_prompt_template(version: str, text: str) -> PromptTemplate:
    """A template file: `<!-- system -->`, the system message, `<!-- user -->`, the user
    message (anything above the first marker is a comment for maintainers)."""
    system_at = text.find("<!-- system -->")
    user_at = text.find("<!-- user -->")
    if system_at < 0 or user_at < system_at:
        raise ValueError(
            f"prompt {version} needs a '<!-- system -->' line followed by a '<!-- user -->' line"
        )
    system = text[system_at + len("<!-- system -->") : user_at].strip()
    user = text[user_at + len("<!-- user -->") :].strip()
    if "$logs" not in user or "$memory" not in user:
        raise ValueError(f"prompt {version}'s user message must use $memory and $logs")
    return PromptTemplate(version=version, system=system, user=user)


def promoted_text(answer: str, *, finish_reason: str, max_chars: int) -> str | None:
    """The facts to append, or None for NOTHING_TO_PROMOTE; raises UnusableAnswer for an
    answer that cannot be appended as it is."""
    text = answer.strip()
    if finish_reason == "length":
        raise UnusableAnswer(
            "the model's answer was cut at the token limit; raise ENGRAM_LLM_MAX_TOKENS or "
            "lower ENGRAM_DREAM_MAX_INPUT_CHARS"
        )
    if text.strip("`").strip() == NOTHING_TO_PROMOTE:
        return None
    if not text:
        raise UnusableAnswer(f"the model answered nothing (not even {NOTHING_TO_PROMOTE})")
    if len(text) > max_chars:
        raise UnusableAnswer(
            f"the model's answer is {len(text)} characters; at most {max_chars} are appended "
            "to MEMORY.md"
        )
    return _demote_headings(text)


def _demote_headings(text: str) -> str:
    """Headings inside the answer nest under the Dreamed section (### and deeper)."""
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip("#")
        level = len(line) - len(stripped)
        if 0 < level < 3 and stripped.startswith(" "):
            line = "###" + stripped
        lines.append(line)
    return "\n".join(lines)


def dreamed_section(existing: str, *, today: date, key: str, version: str, facts: str) -> str:
    """The text appended to MEMORY.md (`existing` is its content, "" when absent): a blank
    line, `## Dreamed YYYY-MM-DD`, the input's marker and the facts."""
    if not existing:
        lead = ""
    elif existing.endswith("\n\n"):
        lead = ""
    elif existing.endswith("\n"):
        lead = "\n"
    else:
        lead = "\n\n"
    return f"{lead}{SECTION_TITLE} {today.isoformat()}\n{marker(key, version)}\n\n{facts}\n"


def advanced_marks(
    watermark: Watermark, listed: Iterable[str], sent: Mapping[str, LogMark]
) -> dict[str, LogMark]:
    """The marks after a run: those of `sent` logs replaced, those of logs no longer listed
    dropped (deleted or archived logs), the others kept."""
    present = set(listed)
    kept = {path: mark for path, mark in watermark.logs.items() if path in present}
    kept.update(sent)
    return kept
