"""Anthropic's memory tool (`memory_20250818`) backed by an engram space.

Claude's memory commands (view, create, str_replace, insert, delete, rename) act on files
under `/memories`; this tool maps `/memories/<path>` onto the document `<path>` of one space,
through `EngramClient`, so the documents are versioned, quota-checked, indexed and searchable
like any other:

    from anthropic import AsyncAnthropic
    from engram.client import EngramClient, Space
    from engram.integrations.anthropic_memory import EngramMemoryTool

    async with EngramClient(addr, token=token, space=Space(name="agent-1")) as engram:
        memory = EngramMemoryTool(engram)
        runner = AsyncAnthropic().beta.messages.tool_runner(
            model=..., max_tokens=1024, tools=[memory], messages=[...]
        )

Rules: paths are confined to `/memories` (anything else, `..`, or a path engram would not
store - engram keeps Markdown, so files end in `.md` - is refused with the reason); the
identity files (IDENTITY.md, SOUL.md, AGENTS.md, USER.md) are read-only, as through every
agent surface; MEMORY.md only grows at its end (an insert after its last line), as the
workspace's append-only policy says. Edits are conditional on the version read (a
concurrent change is retried, never overwritten).
"""

from __future__ import annotations

from typing import Any

from anthropic.lib.tools import BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from engram.client import EngramClient, Space, explain
from engram.domain.errors import DocumentNotFound, EngramError, EtagMismatch
from engram.domain.workspace import MEMORY_PATH, PROTECTED_FILES

ROOT = "/memories"
# A directory view lists this many levels, as Anthropic's own file-system tool does.
VIEW_DEPTH = 2
# Conditional edits tried this many times when another writer changes the document between
# read and write.
EDIT_ATTEMPTS = 5
LINE_NUMBER_WIDTH = 6


def document_path(path: str) -> str:
    """The engram path of `/memories/<path>` ("" for /memories itself); ToolError outside."""
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise ToolError(f"Path must start with /memories, got: {path}")
    relative = path[len(ROOT) :].strip("/")
    if any(part in ("", ".", "..") for part in relative.split("/")) and relative:
        raise ToolError(f"Path {path} would escape /memories directory")
    return relative


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(
        f"{str(n).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines, first)
    )


class EngramMemoryTool(BetaAsyncAbstractMemoryTool):
    """`memory_20250818` over one engram space (the client's, or `space`)."""

    def __init__(self, client: EngramClient, *, space: Space | None = None, **options: Any) -> None:
        super().__init__(**options)
        self._client = client
        self._space = space or client.space

    # --- helpers ------------------------------------------------------------------------------

    async def _call(self, call: Any) -> Any:
        try:
            return await call
        except EngramError as error:
            raise ToolError(explain(error)) from None

    def _writable(self, path: str, shown: str) -> str:
        if path.casefold() in {name.casefold() for name in PROTECTED_FILES}:
            raise ToolError(
                f"{shown} is an identity file: it is read-only for agents (the operator "
                "maintains it)"
            )
        return path

    async def _files(self, directory: str) -> list[str]:
        paths: list[str] = []
        token = ""
        while True:
            page = await self._call(
                self._client.list_documents(
                    directory, recursive=True, page_size=1000, page_token=token, space=self._space
                )
            )
            paths += [entry.path for entry in page.entries if not entry.is_dir]
            token = page.next_page_token
            if not token:
                return paths

    async def _read(self, path: str, shown: str) -> Any:
        try:
            return await self._client.read_document(path, space=self._space)
        except DocumentNotFound:
            raise ToolError(
                f"The path {shown} does not exist. Please provide a valid path."
            ) from None
        except EngramError as error:
            raise ToolError(explain(error)) from None

    async def _edit(self, path: str, shown: str, change: Any) -> str:
        """Reads, applies `change(content) -> (new content, answer)`, writes if unchanged."""
        for _ in range(EDIT_ATTEMPTS):
            current = await self._read(path, shown)
            content, answer = change(current.content)
            try:
                await self._client.write_document(
                    path, content, expected_sha256=current.sha256, space=self._space
                )
            except EtagMismatch:
                continue
            except EngramError as error:
                raise ToolError(explain(error)) from None
            return str(answer)
        raise ToolError(f"{shown} kept changing while it was edited; view it and try again")

    # --- commands -----------------------------------------------------------------------------

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        path = document_path(command.path)
        if path.endswith(".md"):
            document = await self._read(path, command.path)
            lines = document.content.split("\n")
            first = 1
            if command.view_range and len(command.view_range) == 2:
                start, end = command.view_range
                first = max(1, start)
                lines = lines[first - 1 : len(lines) if end == -1 else end]
            return f"Here's the content of {command.path} with line numbers:\n" + _numbered(
                lines, first
            )
        files = await self._files(path)
        if path and not files:
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        shown: dict[str, None] = {}
        for file in files:
            parts = file[len(path) :].strip("/").split("/")
            for depth in range(1, min(len(parts), VIEW_DEPTH) + 1):
                entry = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
                shown[entry] = None
        root = command.path.rstrip("/")
        listing = [root, *(f"{root}/{entry}" for entry in sorted(shown))]
        return (
            f"Here're the files and directories up to 2 levels deep in {command.path}, "
            "excluding hidden items:\n" + "\n".join(listing)
        )

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        path = self._writable(document_path(command.path), command.path)
        try:
            await self._client.write_document(
                path, command.file_text, create_only=True, space=self._space
            )
        except EtagMismatch:
            raise ToolError(f"File {command.path} already exists") from None
        except EngramError as error:
            raise ToolError(explain(error)) from None
        return f"File created successfully at: {command.path}"

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        path = self._writable(document_path(command.path), command.path)
        if path == MEMORY_PATH:
            raise ToolError(f"{command.path} is append-only: insert after its last line instead")

        def change(content: str) -> tuple[str, str]:
            count = content.count(command.old_str)
            if count == 0:
                raise ToolError(
                    f"No replacement was performed, old_str `{command.old_str}` did not "
                    f"appear verbatim in {command.path}."
                )
            if count > 1:
                raise ToolError(
                    f"No replacement was performed. Multiple occurrences of old_str "
                    f"`{command.old_str}`. Please ensure it is unique"
                )
            changed = content.replace(command.old_str, command.new_str)
            line = content[: content.find(command.old_str)].count("\n")
            lines = changed.split("\n")
            start = max(0, line - 2)
            snippet = _numbered(lines[start : line + 3], start + 1)
            return changed, (
                "The memory file has been edited. Here is the snippet showing the change "
                f"(with line numbers):\n{snippet}"
            )

        return await self._edit(path, command.path, change)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        path = self._writable(document_path(command.path), command.path)

        def change(content: str) -> tuple[str, str]:
            lines = content.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            if not 0 <= command.insert_line <= len(lines):
                raise ToolError(
                    f"Invalid `insert_line` parameter: {command.insert_line}. It should be "
                    f"within the range [0, {len(lines)}]."
                )
            if path == MEMORY_PATH and command.insert_line != len(lines):
                raise ToolError(
                    f"{command.path} is append-only: insert after its last line "
                    f"(insert_line {len(lines)})"
                )
            lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
            return "\n".join(lines) + "\n", f"The file {command.path} has been edited."

        return await self._edit(path, command.path, change)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        path = document_path(command.path)
        if not path:
            raise ToolError("Cannot delete the /memories directory itself")
        targets = [path] if path.endswith(".md") else await self._files(path)
        if not targets:
            raise ToolError(f"The path {command.path} does not exist")
        for target in targets:
            self._writable(target, f"{ROOT}/{target}")
            if target == MEMORY_PATH:
                raise ToolError(f"{ROOT}/{MEMORY_PATH} is append-only: it cannot be deleted")
        for target in targets:
            try:
                await self._client.delete_document(target, space=self._space)
            except DocumentNotFound:
                raise ToolError(f"The path {command.path} does not exist") from None
            except EngramError as error:
                raise ToolError(explain(error)) from None
        return f"Successfully deleted {command.path}"

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old = self._writable(document_path(command.old_path), command.old_path)
        new = self._writable(document_path(command.new_path), command.new_path)
        if MEMORY_PATH in (old, new):
            raise ToolError(f"{ROOT}/{MEMORY_PATH} is append-only: it cannot be renamed")
        current = await self._read(old, command.old_path)
        try:
            await self._client.write_document(
                new, current.content, create_only=True, space=self._space
            )
        except EtagMismatch:
            raise ToolError(f"The destination {command.new_path} already exists") from None
        except EngramError as error:
            raise ToolError(explain(error)) from None
        await self._call(
            self._client.delete_document(old, expected_sha256=current.sha256, space=self._space)
        )
        return f"Successfully renamed {command.old_path} to {command.new_path}"
