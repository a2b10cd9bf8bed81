"""LangGraph's long-term memory store (`BaseStore`) on an engram space: the langgraph
package's own store API and a compiled graph whose node uses the store, against a real
`engram dev` (no model is involved, nothing leaves the machine)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from engram.app.embedded import EmbeddedEngram
from engram.client import EngramClient, Space
from engram.integrations.langgraph_store import EngramStore

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(engram: EmbeddedEngram) -> AsyncIterator[EngramClient]:
    async with EngramClient(f"127.0.0.1:{engram.port}", space=Space(name="graph")) as opened:
        yield opened


async def test_put_get_search_delete_and_namespaces(client: EngramClient) -> None:
    store = EngramStore(client)
    await store.aput(("users", "ann"), "prefs", {"drink": "green tea", "rank": 3})
    await store.aput(("users", "ann"), "trip/2026", {"city": "Lisbon", "rank": 5})
    await store.aput(("users", "bob"), "prefs", {"drink": "espresso", "rank": 1})

    item = await store.aget(("users", "ann"), "prefs")
    assert item is not None and item.value == {"drink": "green tea", "rank": 3}
    assert (item.namespace, item.key) == (("users", "ann"), "prefs")
    # Each item is an ordinary Markdown document of the space (keys percent-encoded).
    assert (await client.read_document("users/ann/trip%2F2026.md")).content.startswith("```json")
    assert await store.aget(("users", "ann"), "missing") is None

    # Hybrid search under a namespace finds the write just made (read your writes).
    found = await store.asearch(("users",), query="which tea does she drink?", limit=3)
    assert found and (found[0].namespace, found[0].key) == (("users", "ann"), "prefs")
    assert found[0].score is not None and 0 < found[0].score <= 1
    only_bob = await store.asearch(("users", "bob"), query="drink")
    assert [i.namespace for i in only_bob] == [("users", "bob")]
    ranked = await store.asearch(("users",), filter={"rank": {"$gte": 3}})
    assert sorted(i.key for i in ranked) == ["prefs", "trip/2026"]
    assert [
        i.value["city"] for i in await store.asearch(("users", "ann"), filter={"city": "Lisbon"})
    ] == ["Lisbon"]

    assert await store.alist_namespaces() == [("users", "ann"), ("users", "bob")]
    assert await store.alist_namespaces(suffix=("bob",)) == [("users", "bob")]
    assert await store.alist_namespaces(max_depth=1) == [("users",)]

    await store.adelete(("users", "bob"), "prefs")
    assert await store.aget(("users", "bob"), "prefs") is None
    assert await store.alist_namespaces() == [("users", "ann")]
    with pytest.raises(NotImplementedError, match="async API"):
        store.put(("users",), "x", {"a": 1})


class State(TypedDict):
    user: str
    fact: str
    recalled: str


async def remember(state: State, *, store: BaseStore) -> dict[str, str]:
    await store.aput(("memories", state["user"]), "latest", {"text": state["fact"]})
    hits = await store.asearch(("memories", state["user"]), query=state["fact"], limit=1)
    return {"recalled": hits[0].value["text"] if hits else ""}


async def test_a_compiled_graph_uses_the_store(client: EngramClient) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    graph = builder.compile(store=EngramStore(client))
    out = await graph.ainvoke({"user": "ann", "fact": "Ann's standup is at 9:30.", "recalled": ""})
    assert out["recalled"] == "Ann's standup is at 9:30."
    assert "9:30" in (await client.read_document("memories/ann/latest.md")).content
