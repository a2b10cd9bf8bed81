"""Anthropic's memory tool (`memory_20250818`) on an engram space, driven through the
anthropic package's own command parsing (`BetaAsyncAbstractMemoryTool.call`) and its tool
runner, against a real `engram dev`. The model is a test double (an httpx transport
answering as the Messages API would): nothing leaves the machine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.tools import ToolError

from engram.app.embedded import EmbeddedEngram
from engram.client import EngramClient, Space
from engram.integrations.anthropic_memory import EngramMemoryTool

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(engram: EmbeddedEngram) -> AsyncIterator[EngramClient]:
    async with EngramClient(f"127.0.0.1:{engram.port}", space=Space(name="claude")) as opened:
        yield opened


async def run(tool: EngramMemoryTool, **command: Any) -> str:
    return str(await tool.call(command))


async def refused(tool: EngramMemoryTool, **command: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await tool.call(command)
    return str(caught.value)


async def test_the_six_commands_act_on_the_space(client: EngramClient) -> None:
    tool = EngramMemoryTool(client)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}
    created = await run(
        tool, command="create", path="/memories/prefs.md", file_text="tea\ncoffee: no\n"
    )
    assert created == "File created successfully at: /memories/prefs.md"
    assert (await client.read_document("prefs.md")).content == "tea\ncoffee: no\n"
    assert "already exists" in await refused(
        tool, command="create", path="/memories/prefs.md", file_text="x"
    )

    viewed = await run(tool, command="view", path="/memories/prefs.md")
    assert viewed.endswith("     1\ttea\n     2\tcoffee: no\n     3\t")
    edited = await run(
        tool, command="str_replace", path="/memories/prefs.md", old_str="tea", new_str="green tea"
    )
    assert "has been edited" in edited and "green tea" in edited
    assert "did not appear verbatim" in await refused(
        tool, command="str_replace", path="/memories/prefs.md", old_str="cocoa", new_str="x"
    )
    await run(
        tool, command="insert", path="/memories/prefs.md", insert_line=0, insert_text="# Prefs"
    )
    document = await client.read_document("prefs.md")
    assert document.content == "# Prefs\ngreen tea\ncoffee: no\n"
    assert document.version == 3  # each edit is one conditional write

    await run(tool, command="create", path="/memories/projects/apollo.md", file_text="launch\n")
    listing = await run(tool, command="view", path="/memories")
    assert "/memories/prefs.md" in listing and "/memories/projects/" in listing
    assert "/memories/projects/apollo.md" in listing

    renamed = await run(
        tool, command="rename", old_path="/memories/prefs.md", new_path="/memories/me/prefs.md"
    )
    assert renamed == "Successfully renamed /memories/prefs.md to /memories/me/prefs.md"
    assert (await client.read_document("me/prefs.md")).content.startswith("# Prefs")
    assert "does not exist" in await refused(tool, command="view", path="/memories/prefs.md")
    assert await run(tool, command="delete", path="/memories/projects") == (
        "Successfully deleted /memories/projects"
    )
    assert "does not exist" in await refused(tool, command="view", path="/memories/projects")


async def test_paths_are_confined_and_protected_files_respected(client: EngramClient) -> None:
    tool = EngramMemoryTool(client)
    await client.write_document("SOUL.md", "# Soul\nKind.\n")
    await client.write_document("MEMORY.md", "Dana likes Thursdays.\n")
    for path in ("/etc/passwd", "/memoriesx/a.md", "/memories/../secrets.md", "/memories/a/./b.md"):
        message = await refused(tool, command="create", path=path, file_text="x")
        assert "/memories" in message, message
    assert "INVALID_ARGUMENT" in await refused(
        tool, command="create", path="/memories/notes.txt", file_text="x"
    )
    for command in (
        {"command": "create", "path": "/memories/SOUL.md", "file_text": "Be evil."},
        {"command": "str_replace", "path": "/memories/soul.md", "old_str": "Kind", "new_str": "x"},
        {"command": "delete", "path": "/memories/SOUL.md"},
        {"command": "rename", "old_path": "/memories/SOUL.md", "new_path": "/memories/x.md"},
    ):
        assert "identity file" in await refused(tool, **command), command
    assert (await client.read_document("SOUL.md")).content == "# Soul\nKind.\n"
    assert "Kind." in await run(tool, command="view", path="/memories/SOUL.md")

    # MEMORY.md only grows at its end.
    assert "append-only" in await refused(
        tool, command="str_replace", path="/memories/MEMORY.md", old_str="Dana", new_str="Eve"
    )
    assert "append-only" in await refused(
        tool, command="insert", path="/memories/MEMORY.md", insert_line=0, insert_text="x"
    )
    assert "append-only" in await refused(tool, command="delete", path="/memories/MEMORY.md")
    await run(
        tool, command="insert", path="/memories/MEMORY.md", insert_line=1, insert_text="Ann: tea."
    )
    assert (await client.read_document("MEMORY.md")).content == (
        "Dana likes Thursdays.\nAnn: tea.\n"
    )


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-double",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


async def test_the_sdk_tool_runner_executes_the_models_memory_calls(
    client: EngramClient,
) -> None:
    """A test double of the Messages API asks for one memory command, then ends the turn;
    the SDK's runner executes it on engram and sends the result back."""
    sent: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        sent.append(body)
        if len(sent) == 1:
            use = {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "memory",
                "input": {
                    "command": "create",
                    "path": "/memories/dana.md",
                    "file_text": "Dana: 9:30\n",
                },
            }
            return httpx2.Response(200, json=_message([use], "tool_use"))
        return httpx2.Response(200, json=_message([{"type": "text", "text": "Saved."}], "end_turn"))

    model = AsyncAnthropic(
        api_key="test-double",
        base_url="http://model.invalid",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)),
    )
    runner = model.beta.messages.tool_runner(
        model="claude-test-double",
        max_tokens=256,
        tools=[EngramMemoryTool(client)],
        messages=[{"role": "user", "content": "Remember Dana's standup time."}],
    )
    final = await runner.until_done()
    await model.close()
    assert final.content[0].text == "Saved."  # type: ignore[union-attr]
    assert sent[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    result = sent[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    assert "File created successfully at: /memories/dana.md" in json.dumps(result)
    assert (await client.read_document("dana.md")).content == "Dana: 9:30\n"
