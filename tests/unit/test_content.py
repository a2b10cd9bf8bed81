"""Content rules: size cap, UTF-8, and credential shapes refused without echoing them."""

from __future__ import annotations

import pytest

from engram.domain.content import (
    check_append,
    check_size,
    check_text,
    decode_utf8,
    sha256_hex,
    word_count,
)
from engram.domain.credentials import KINDS, find_credential
from engram.domain.errors import ContentTooLarge, InvalidContent, SecretInContent

pytestmark = pytest.mark.unit

# Shaped like real credentials; none of them is live.
SAMPLES = {
    "aws_access_key_id": "AKIAQ3EGUK5EXAMPLE7Z",
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "gitlab_token": "glpat-" + "xY3zA9bC7dE5fG1hJ2kL",
    "slack_token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack_webhook": "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX",
    "anthropic_api_key": "sk-ant-api03-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 3,
    "openai_api_key": "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0PpOoNnMmLlKk",
    "stripe_live_key": "sk_live_" + "51HbQaBcDeFgHiJkLmNoPqRsTu",
    "google_api_key": "AIza" + "SyD3xAmPl3K3y_f0r-T3st1ng0nlyAbCdEf",
    "pem_private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----",
}


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == set(KINDS)


@pytest.mark.parametrize(("kind", "secret"), SAMPLES.items())
def test_credentials_are_refused_naming_the_kind_without_echoing(kind: str, secret: str) -> None:
    text = f"# Notes\n\nDeploy with key {secret} tomorrow.\n"
    with pytest.raises(SecretInContent) as caught:
        check_text(text)
    error = caught.value
    assert error.metadata["kind"] == kind
    assert "line 3" in error.message
    assert secret not in error.message
    assert secret[:12] not in error.message
    assert secret not in str(error.metadata)


@pytest.mark.parametrize(
    "harmless",
    [
        "The AKIA prefix marks AWS keys.",
        "Use sk-... style keys from the vault.",
        "ghp_short",
        "-----BEGIN PUBLIC KEY-----",
        "A task about ERR_4021 and deploy-2026-03-03.",
        "AIza is how Google keys start",
    ],
)
def test_prose_about_credentials_is_allowed(harmless: str) -> None:
    assert find_credential(harmless) is None
    check_text(harmless)


def test_anthropic_keys_are_named_as_anthropic_not_openai() -> None:
    finding = find_credential(SAMPLES["anthropic_api_key"])
    assert finding is not None and finding.kind == "anthropic_api_key"


def test_secret_split_across_an_append_boundary_is_caught() -> None:
    secret = SAMPLES["github_token"]
    existing = "line one\nkey: " + secret[:20]
    with pytest.raises(SecretInContent, match="line 2"):
        check_append(existing, secret[20:] + "\n")


def test_size_cap_and_zero_cap() -> None:
    check_size(10, 10)
    with pytest.raises(ContentTooLarge, match="at most 10 bytes"):
        check_size(11, 10)
    check_size(0, 0)
    with pytest.raises(ContentTooLarge, match="stores no document content"):
        check_size(1, 0)


def test_invalid_utf8_names_the_offset() -> None:
    with pytest.raises(InvalidContent, match="offset 3"):
        decode_utf8(b"abc\xff", what="entry")


def test_nul_is_refused() -> None:
    with pytest.raises(InvalidContent, match="NUL"):
        check_text("a\x00b")


def test_derived_facts() -> None:
    assert sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert word_count("  one two\nthree\t") == 3
