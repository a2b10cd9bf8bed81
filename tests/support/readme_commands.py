"""The `engram ...` command lines of README.md's ```bash fences, in order.

A fenced line (continuation lines joined) counts when one of its commands (split at `|`,
`&&`, `||` and `;`, after any `VAR=value` assignments) is `engram`. Lines that start a
server or need a cluster belong in ```text fences, where they are shown but not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\S*)\s*$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Commands that start a long-running server (never in a ```bash fence): `engram dev`,
# `engram serve`, `engram mcp` (stdio or HTTP), `engram watch` without --count.
SERVER_COMMANDS = ("dev", "serve", "mcp")


@dataclass(frozen=True)
class CommandLine:
    line: int  # 1-based line number in the README where the command starts
    text: str  # the command as bash runs it (continuations joined)
    section: str  # the nearest heading above it


def fenced_lines(markdown: str, language: str = "bash") -> list[CommandLine]:
    """Every logical line of the fences of `language`, with its line number and section."""
    found: list[CommandLine] = []
    section = ""
    inside: str | None = None
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(markdown.splitlines(), start=1):
        fence = FENCE.match(raw.strip())
        if inside is None:
            if fence:
                inside = fence.group(1)
            elif raw.startswith("#"):
                section = raw.lstrip("#").strip()
            continue
        if fence and not fence.group(1):
            inside = None
            continue
        if inside != language:
            continue
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        text = " ".join(part.strip() for part in pending).strip()
        pending = []
        if text and not text.startswith("#"):
            found.append(CommandLine(start, text, section))
    return found


def commands_of(text: str) -> list[list[str]]:
    """The simple commands of a line (words, assignments dropped), comments removed."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("|", "||", "&&", ";", "&", "(", ")"):
            commands.append([])
        elif not commands[-1] and ASSIGNMENT.match(token):
            continue
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


def is_engram(words: list[str]) -> bool:
    return words[0] == "engram" or words[0].endswith("/engram")


def engram_lines(markdown: str) -> list[CommandLine]:
    """The ```bash lines that run `engram`, in README order."""
    return [
        line
        for line in fenced_lines(markdown)
        if any(is_engram(words) for words in commands_of(line.text))
    ]


def starts_a_server(line: CommandLine) -> bool:
    """Whether the line runs `engram dev|serve|mcp` or a `watch` without `--count`."""
    for words in commands_of(line.text):
        if not is_engram(words):
            continue
        verbs = [w for w in words[1:] if not w.startswith("-")]
        if verbs[:1] and verbs[0] in SERVER_COMMANDS:
            return True
        if verbs[:1] == ["watch"] and "--count" not in words:
            return True
    return False


def readme_engram_lines(readme: Path) -> list[CommandLine]:
    return engram_lines(readme.read_text(encoding="utf-8"))
