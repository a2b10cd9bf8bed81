"""Recognises credentials of published shapes in document bodies.

Memory documents are read back into prompts and shared across bots and projects, so a
credential stored in one leaks widely. Writes carrying one are refused, naming the kind
and the line, never echoing the secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Order matters where shapes overlap: Anthropic keys also start with "sk-". Each pattern
# starts with a literal (or a character class) and is searched on its own: sre then skips
# ahead to that prefix, where one combined alternation (or a leading \b) would try every
# position - 1.4 s per MiB of text, holding the GIL. A leading word boundary is checked by
# hand (`_BOUNDED`).
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("aws_access_key_id", r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    ("github_token", r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", r"xox[abeoprs]-(?:[0-9A-Za-z]+-){1,4}[0-9A-Za-z]{6,}"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
    ),
    ("anthropic_api_key", r"sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{32,}"),
    (
        "openai_api_key",
        r"sk-(?:(?:proj-|svcacct-|admin-)[A-Za-z0-9_\-]{32,}"
        r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}\b"
        r"|[A-Za-z0-9]{48}\b)",
    ),
    # "sk_live_" or "rk_live_": the leading letter is checked by hand (`_LEAD`).
    ("stripe_live_key", r"k_live_[A-Za-z0-9]{24,}"),
    ("google_api_key", r"AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    (
        "pem_private_key",
        r"-----BEGIN (?:(?:RSA|DSA|EC|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY(?: BLOCK)?-----",
    ),
)
# Shapes that must start at a word boundary.
_BOUNDED = frozenset(
    {
        "aws_access_key_id",
        "github_token",
        "gitlab_token",
        "slack_token",
        "anthropic_api_key",
        "openai_api_key",
        "stripe_live_key",
        "google_api_key",
    }
)
# Shapes whose first character is checked by hand (a class would defeat the prefix scan).
_LEAD = {"stripe_live_key": "sr"}
_COMPILED = tuple((kind, re.compile(pattern)) for kind, pattern in _PATTERNS)
_WORD = re.compile(r"\w")

KINDS: tuple[str, ...] = tuple(kind for kind, _ in _PATTERNS)

_LABELS = {
    "aws_access_key_id": "an AWS access key id",
    "github_token": "a GitHub token",
    "gitlab_token": "a GitLab token",
    "slack_token": "a Slack token",
    "slack_webhook": "a Slack webhook URL",
    "anthropic_api_key": "an Anthropic API key",
    "openai_api_key": "an OpenAI API key",
    "stripe_live_key": "a Stripe live key",
    "google_api_key": "a Google API key",
    "pem_private_key": "a PEM private key",
}


@dataclass(frozen=True, slots=True)
class CredentialFinding:
    kind: str
    line: int

    @property
    def label(self) -> str:
        return _LABELS[self.kind]


def _first(kind: str, pattern: re.Pattern[str], text: str) -> int | None:
    lead = _LEAD.get(kind)
    for match in pattern.finditer(text):
        start = match.start()
        if lead is not None:
            if start == 0 or text[start - 1] not in lead:
                continue
            start -= 1
        if kind not in _BOUNDED or start == 0 or not _WORD.match(text, start - 1):
            return start
    return None


def find_credential(text: str, *, first_line: int = 1) -> CredentialFinding | None:
    """Returns the first credential-shaped match in `text` (the earliest; at one position
    the first kind listed), or None."""
    if not text:
        return None
    found: tuple[int, int, str] | None = None
    for order, (kind, pattern) in enumerate(_COMPILED):
        start = _first(kind, pattern, text)
        if start is not None and (found is None or (start, order) < found[:2]):
            found = (start, order, kind)
    if found is None:
        return None
    start, _, kind = found
    return CredentialFinding(kind=kind, line=first_line + text.count("\n", 0, start))
