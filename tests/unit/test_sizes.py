"""Sizes: one parser (pydantic's ByteSize) for the CLI and the settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engram.runtime.settings import Settings
from engram.runtime.sizes import MAX_SIZE, format_size, parse_size

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("1048576", 1_048_576),
        ("2GB", 2_000_000_000),
        ("2GiB", 2 * 1024**3),
        ("2 gib", 2 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("500mb", 500_000_000),
        ("1.5KiB", 1536),
        ("10kb", 10_000),
        (" 64MiB ", 64 * 1024**2),
    ],
)
def test_decimal_and_binary_units_are_read(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-5", "2XB", "1e3", "GiB", "2 GiBs"])
def test_unreadable_sizes_say_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match=r"cannot read .* as a size: .*2GB, 2GiB"):
        parse_size(text)


def test_sizes_beyond_int64_are_refused() -> None:
    assert parse_size(str(MAX_SIZE)) == MAX_SIZE
    with pytest.raises(ValueError, match="too large"):
        parse_size("9" * 40)


def test_settings_read_both_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_QUOTA_ORG", "2GB")
    monkeypatch.setenv("ENGRAM_QUOTA_TENANT_TOTAL", "2GiB")
    monkeypatch.setenv("ENGRAM_MAX_DOC_BYTES", "4194304")
    settings = Settings()
    assert settings.quota_org == 2_000_000_000
    assert settings.quota_tenant_total == 2 * 1024**3
    assert settings.max_doc_bytes == 4 * 1024**2
    assert settings.quota_private == 64 * 1024**2, "defaults unchanged"


@pytest.mark.parametrize("value", ["lots", "-1GB"])
def test_settings_refuse_unreadable_sizes(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ENGRAM_QUOTA_USER", value)
    with pytest.raises(ValidationError, match="quota_user"):
        Settings()


def test_sizes_are_shown_in_binary_units() -> None:
    assert format_size(0) == "0 B"
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(2 * 1024**3) == "2.0 GiB"
    assert format_size(2_000_000_000) == "1.9 GiB"
