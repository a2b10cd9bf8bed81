"""The demo `engram dev --demo` runs, against a server whose index misbehaves: it says what
happened (`degraded: <reasons>`, `no results`) instead of an empty table without a word."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from rich.console import Console

from engram.cli import demo
from engram.domain.chunks import ScoredChunk
from engram.indexes.ports import IndexUnavailable
from tests.conftest import EngramFactory

pytestmark = pytest.mark.e2e


async def test_the_demo_says_degraded_and_no_results(
    engram_factory: EngramFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with engram_factory() as engram:
        # Fault injection on the live indexes: the vector index fails every search, the
        # keyword index finds nothing.
        async def vector_down(*_: Any, **__: Any) -> Sequence[ScoredChunk]:
            raise IndexUnavailable("the vector index is down (injected)")

        async def keyword_empty(*_: Any, **__: Any) -> Sequence[ScoredChunk]:
            return []

        monkeypatch.setattr(engram.indexing.vector, "search", vector_down)
        monkeypatch.setattr(engram.indexing.keyword, "search", keyword_empty)
        monkeypatch.setattr(demo, "SEARCH_RETRY_SECONDS", 0.01)
        console = Console(record=True, width=100)
        await demo.run_demo(f"127.0.0.1:{engram.port}", console)
    output = console.export_text()
    assert "seeded private:default:" in output
    for query in demo.DEMO_SEARCHES:
        answer = output[output.index(f"memory_search: {query!r}: no results") :]
        assert answer.splitlines()[1] == (
            "degraded: vector index: the vector index is down (injected)"
        ), answer
    assert "in the space private:default" in output


async def test_the_demo_finds_its_notes_once_indexed(
    engram_factory: EngramFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo waits 20 s for the indexer (tens of milliseconds on a quiet machine); under
    # CI's three sessions on two cores the first embeddings once took longer than that.
    monkeypatch.setattr(demo, "INDEX_WAIT_SECONDS", 180.0)
    async with engram_factory() as engram:
        console = Console(record=True, width=100)
        await demo.run_demo(f"127.0.0.1:{engram.port}", console)
    output = console.export_text()
    assert "indexed (waited " in output
    identifier = output[output.index("memory_search: 'ERR_4021'") : output.index("system prompt")]
    assert "MEMORY.md" in identifier and "no results" not in identifier
    question = output[output.index("memory_search: 'when do we ship releases?'") :]
    question = question[: question.index("memory_search: 'ERR_4021'")]
    # Either hits, or an empty answer followed by what the floor held back: the daily note.
    assert "no results" not in question or "with min_relevance 0:" in question, question
    assert "MEMORY.md" in question, question
