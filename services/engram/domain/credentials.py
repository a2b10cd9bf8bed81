"""Recognises credentials of published shapes in document bodies.

Memory documents are read back into prompts and shared across bots and projects, so a
credential stored in one leaks widely. Writes carrying one are refused, naming the kind
and the line, never echoing the secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Order matters where shapes overlap: Anthropic keys also start with "sk-".
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack_token", r"\bxox[abeoprs]-(?:[0-9A-Za-z]+-){1,4}[0-9A-Za-z]{6,}"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
    ),
    ("anthropic_api_key", r"\bsk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{32,}"),
    (
        "openai_api_key",
        r"\bsk-(?:proj-|svcacct-|admin-)[A-Za-z0-9_\-]{32,}"
        r"|\bsk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}\b"
        r"|\bsk-[A-Za-z0-9]{48}\b",
    ),
    ("stripe_live_key", r"\b(?:sk|rk)_live_[A-Za-z0-9]{24,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    (
        "pem_private_key",
        r"-----BEGIN (?:(?:RSA|DSA|EC|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY(?: BLOCK)?-----",
    ),
)

_COMBINED = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _PATTERNS))

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


def find_credential(text: str, *, first_line: int = 1) -> CredentialFinding | None:
    """Returns the first credential-shaped match in `text`, or None."""
    match = _COMBINED.search(text)
    if match is None:
        return None
    kind = match.lastgroup
    assert kind is not None
    return CredentialFinding(kind=kind, line=first_line + text.count("\n", 0, match.start()))
