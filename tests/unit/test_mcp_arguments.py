"""The MCP tools' arguments are strict and their refusals read like every engram error:
`INVALID_ARGUMENT: <field> ... [INVALID_ARGUMENT]`, never pydantic's text. Checked in process
with the SDK's own client; every refused call stops before any call to engram (the client
points at a closed port)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from engram.agent_mcp.callers import space_from_path
from engram.agent_mcp.tools import build_server
from engram.client import EngramClient, Space
from engram.domain.errors import InvalidArgument

pytestmark = pytest.mark.unit

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("memory_search", {"query": "x", "limit": "3"}, "limit must be an integer, not a string"),
    ("memory_search", {"query": "x", "limit": True}, "limit must be an integer, not a boolean"),
    ("memory_search", {"query": "x", "limit": 2.5}, "limit must be an integer, not a number"),
    ("memory_search", {"query": "x", "limit": 0}, "limit must be at least 1"),
    ("memory_search", {"query": "x", "limit": 21}, "limit must be at most 20"),
    ("memory_search", {"query": 7}, "query must be a string, not a number"),
    ("memory_search", {}, "query is required"),
    (
        "memory_write",
        {"content": "x", "append": "false"},
        "append must be true or false, not a string",
    ),
    ("memory_write", {"content": "x", "append": 0}, "append must be true or false, not a number"),
    ("memory_write", {"content": None}, "content must be a string, not null"),
    (
        "memory_write",
        {"content": "x", "target": ["memory"]},
        "target must be a string, not an array",
    ),
    ("memory_read", {"path": {"p": 1}}, "path must be a string, not an object"),
    ("memory_tree", {"depth": "2"}, "depth must be an integer, not a string"),
    ("memory_tree", {"depth": 11}, "depth must be at most 10"),
]


@pytest.mark.parametrize(("tool", "arguments", "message"), REFUSED)
async def test_a_bad_argument_is_refused_naming_its_field(
    tool: str, arguments: dict[str, Any], message: str
) -> None:
    engram = EngramClient("127.0.0.1:9", retries=0, timeout=1)
    async with Client(build_server(engram)) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    text = "".join(b.text for b in result.content if isinstance(b, TextContent))
    assert text == f"INVALID_ARGUMENT: {message} [INVALID_ARGUMENT]"


@pytest.mark.parametrize(
    ("rest", "space"),
    [
        ("private/notes", Space("private", "notes")),
        ("org/handbook", Space("org", "handbook")),
        ("user/me", Space("user", "me")),
        ("project/apollo/plans", Space("project", "plans", project="apollo")),
        ("bot/apollo/helper/runs", Space("bot", "runs", project="apollo", bot="helper")),
    ],
)
def test_the_request_path_names_the_space(rest: str, space: Space) -> None:
    assert space_from_path(rest) == space


@pytest.mark.parametrize(
    ("rest", "hint"),
    [
        ("private", "/mcp/private/<name>"),
        ("private/a/b", "/mcp/private/<name>"),
        ("project/plans", "/mcp/project/<project>/<name>"),
        ("bot/apollo/runs", "/mcp/bot/<project>/<bot>/<name>"),
        ("private//x", "/mcp/private/<name>"),
    ],
)
def test_a_malformed_space_path_names_the_expected_form(rest: str, hint: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        space_from_path(rest)
    assert hint in refused.value.message


def test_an_unknown_visibility_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="visibility 'secret'"):
        space_from_path("secret/notes")
