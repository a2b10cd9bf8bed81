"""The short demo `engram dev --demo` runs against itself over gRPC, for newcomers: an agent's
workspace seeded, written and searched through the memory tools, and its system prompt."""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree

from engram.cli.memory_commands import add_tree_nodes, hits_table
from engram.client import EngramClient, SearchResults, Space
from engram.domain.errors import NotFound

# The space every CLI command uses when none is named, so `engram ls` shows the demo's work.
DEMO_SPACE = Space()
DEMO_SPACE_LABEL = f"{DEMO_SPACE.visibility}:{DEMO_SPACE.name}"

FACTS = """- The user prefers concise answers with code examples.
- Project codename: engram. Deploys go out on Tuesdays.
- 2026-03-03: the nightly build failed with ERR_4021 until the cache volume was resized."""
LOG_ENTRY = "Ran the engram demo: seeded this workspace, searched it, assembled the prompt."

# Hybrid searches: a question in other words than the notes use, and a bare identifier.
DEMO_SEARCHES = ("when do we ship releases?", "ERR_4021")
# Indexing in `engram dev` takes tens of milliseconds; the demo waits at most this long.
INDEX_WAIT_SECONDS = 20.0
# Polls of the indexer's backlog: from this interval, doubling up to the next one.
POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.5
# A degraded answer (one leg failed or timed out, e.g. on a busy machine) is asked again this
# many times, a second apart, before the demo shows it as it is.
SEARCH_ATTEMPTS = 3
SEARCH_RETRY_SECONDS = 1.0


async def run_demo(address: str, console: Console, *, token: str = "") -> None:
    """Seeds the default workspace (`private:default`, the CLI's default space), writes a fact
    and a daily-log entry through the memory tools, waits until the indexer has them, searches
    them, and prints the system prompt they assemble into."""
    async with EngramClient(address, token=token, space=DEMO_SPACE) as client:
        seeded = await client.seed_workspace()
        console.print(
            f"[green]seeded[/] {DEMO_SPACE_LABEL}: "
            + (", ".join(seeded.created_paths) or "nothing new (already seeded)"),
            highlight=False,
        )
        if FACTS.splitlines()[0] in await _memory_md(client):
            console.print("MEMORY.md already holds the demo's facts", highlight=False)
        else:
            written = await client.memory_write(FACTS, target="memory")
            console.print(
                f"[green]memory_write[/] memory: appended to {written.path} v{written.version} "
                f"(+{written.content_length} B)",
                highlight=False,
            )
        logged = await client.memory_write(LOG_ENTRY, target="daily_log")
        console.print(
            f"[green]memory_write[/] daily_log: appended to {logged.path} v{logged.version}",
            highlight=False,
        )
        tree = Tree("[bold]memory_tree[/] (depth 2)")
        add_tree_nodes(tree, await client.memory_tree(depth=2))
        console.print(tree)
        waited = await _wait_until_indexed(client)
        if waited is None:
            console.print(
                f"[yellow]not indexed yet[/] after {INDEX_WAIT_SECONDS:.0f} s "
                "(`engram index-status` shows the backlog); searching anyway",
                highlight=False,
            )
        else:
            console.print(f"[green]indexed[/] (waited {waited:.2f} s)", highlight=False)
        for query in DEMO_SEARCHES:
            found = await _search(client, query)
            title = f"memory_search: {query!r}"
            if found.results:
                console.print(hits_table(found, title=title))
            else:
                console.print(Text(f"{title}: ").append("no results", style="yellow"))
                await _show_nearest(client, query, console)
            if found.degraded:
                reasons = "; ".join(found.degraded_reasons) or "one index did not answer"
                console.print(f"[yellow]degraded:[/] {reasons}", highlight=False)
        prompt = await client.system_prompt()
    console.print(
        Panel(
            Text(prompt.text.rstrip()),
            title=f"system prompt: {len(prompt.sections)} sections, {len(prompt.text)} chars",
            expand=False,
        ),
        soft_wrap=False,  # wrap long lines inside the panel instead of cutting them
    )
    console.print(
        f"The demo's documents are in the space {DEMO_SPACE_LABEL}, the default of every "
        "command: try `engram ls`, `engram read MEMORY.md`, "
        '`engram search "when do we ship releases?"`.',
        highlight=False,
    )


async def _search(client: EngramClient, query: str) -> SearchResults:
    """memory_search, asked again (bounded) while the answer is degraded."""
    found = await client.memory_search(query, limit=3)
    for _ in range(SEARCH_ATTEMPTS - 1):
        if not found.degraded:
            break
        await asyncio.sleep(SEARCH_RETRY_SECONDS)
        found = await client.memory_search(query, limit=3)
    return found


async def _show_nearest(client: EngramClient, query: str, console: Console) -> None:
    """After an empty answer: what the same search finds with the relevance floor off, so a
    newcomer sees the floor at work (memory_search answers nothing rather than hits unlikely
    to hold the answer) and what it held back."""
    nearest = await client.memory_search(query, limit=3, min_relevance=0.0)
    if nearest.results and not nearest.degraded:
        console.print(
            "no hit reached memory_search's default min_relevance; with min_relevance 0:",
            highlight=False,
        )
        console.print(hits_table(nearest))


async def _memory_md(client: EngramClient) -> str:
    try:
        return (await client.memory_read("MEMORY.md")).content
    except NotFound:  # deleted by someone since it was seeded
        return ""


async def _wait_until_indexed(client: EngramClient) -> float | None:
    """Seconds until the indexer's backlog was empty, or None after INDEX_WAIT_SECONDS."""
    start = time.monotonic()
    deadline = start + INDEX_WAIT_SECONDS
    pause = POLL_FIRST_SECONDS
    while time.monotonic() < deadline:
        if (await client.index_status()).backlog == 0:
            return time.monotonic() - start
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, POLL_MAX_SECONDS)
    return None
