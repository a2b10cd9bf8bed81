"""`engram purge`, `engram spaces` and `engram spaces delete` against `engram dev`."""

from __future__ import annotations

import pytest

from engram.app.embedded import EmbeddedEngram
from tests.e2e.test_cli import Cli

pytestmark = pytest.mark.e2e

SPACE_ID = "v1:private:local::::default"


@pytest.fixture
def cli(engram: EmbeddedEngram) -> Cli:
    return Cli(engram.port)


async def test_purge_asks_unless_told_yes(cli: Cli) -> None:
    await cli("write", "a.md", stdin="one\n")
    await cli("write", "a.md", stdin="two\n")
    refused = await cli("purge", "a.md", stdin="n\n", ok=False)
    assert "nothing erased" in refused
    assert await cli("read", "a.md") == "two\n"
    assert "purged a.md: the document and 1 kept version(s), 4 B given back" in await cli(
        "purge", "a.md", "--yes"
    )
    assert "NOT_FOUND" in await cli("read", "a.md", "--version", "1", ok=False)
    assert "nothing stored at a.md" in await cli("purge", "a.md", "--yes")


async def test_spaces_lists_and_deletes(cli: Cli) -> None:
    await cli("write", "a.md", stdin="alpha\n")
    await cli("write", "b.md", "--name", "other", stdin="beta\n")
    listed = await cli("spaces")
    assert SPACE_ID in listed and "v1:private:local::::other" in listed
    wrong = await cli("spaces", "delete", "--confirm", "default", ok=False)
    assert "INVALID_ARGUMENT" in wrong and SPACE_ID in wrong
    deleted = await cli("spaces", "delete", "--confirm", SPACE_ID)
    assert f"deleted {SPACE_ID}: 1 document(s)" in deleted
    listed = await cli("spaces")
    assert SPACE_ID not in listed and "v1:private:local::::other" in listed
    assert "v1:global" not in await cli("spaces", "--global")
