"""engram.client's conversions: what a call puts on the wire, and what comes back to the
caller (dataclasses, never protobuf)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from engram.client import EngramClient, Heartbeat, Space, explain
from engram.client import mapping as m
from engram.client.results import search, workspace
from engram.domain.errors import (
    InvalidArgument,
    InvalidSpaceRef,
    ProtectedFile,
    RateLimited,
)
from engram.v1 import search_pb2, space_pb2, workspace_pb2

pytestmark = pytest.mark.unit


def test_space_defaults_to_the_private_default_space() -> None:
    ref = m.space_to_proto(Space())
    assert ref.visibility == space_pb2.VISIBILITY_PRIVATE and ref.name == "default"
    bot = m.space_to_proto(Space("bot", "mem", project="p1", bot="b1"))
    assert (bot.visibility, bot.project, bot.bot) == (space_pb2.VISIBILITY_BOT, "p1", "b1")
    assert m.space_from_proto(bot) == Space("bot", "mem", project="p1", bot="b1")


def test_unknown_visibility_is_refused_when_the_space_is_made() -> None:
    with pytest.raises(InvalidSpaceRef) as bad:
        Space(visibility="Private")
    assert bad.value.field == "space.visibility"
    assert "private, bot, project, cross_project, user, org, global" in bad.value.message


@pytest.mark.parametrize(
    ("target", "kind", "path"),
    [
        ("daily_log", workspace_pb2.MEMORY_TARGET_DAILY_LOG, ""),
        ("memory", workspace_pb2.MEMORY_TARGET_MEMORY, ""),
        ("heartbeat", workspace_pb2.MEMORY_TARGET_HEARTBEAT, ""),
        ("projects/apollo.md", workspace_pb2.MEMORY_TARGET_PATH, "projects/apollo.md"),
        ("SOUL.md", workspace_pb2.MEMORY_TARGET_PATH, "SOUL.md"),
    ],
)
def test_memory_write_targets(target: str, kind: int, path: str) -> None:
    request = workspace.memory_write_request(
        Space(), "x", target=target, append=None, time_zone="", session="", heartbeat=None
    )
    assert (request.target, request.path) == (kind, path)


def test_append_unset_is_left_to_the_server_default() -> None:
    def append_field(append: bool | None) -> bool | None:
        request = workspace.memory_write_request(
            Space(), "x", target="memory", append=append, time_zone="", session="", heartbeat=None
        )
        return request.append if request.HasField("append") else None

    assert append_field(None) is None
    assert append_field(True) is True
    assert append_field(False) is False


def test_heartbeat_fields_travel_with_the_write() -> None:
    seen = datetime(2026, 12, 1, 10, 15, tzinfo=timezone(timedelta(hours=1)))
    request = workspace.memory_write_request(
        Space(),
        "alive",
        target="heartbeat",
        append=False,
        time_zone="Europe/Berlin",
        session="cli",
        heartbeat=Heartbeat(seen, "s-1", "cli", 7, ("reply to Dana",)),
    )
    beat = request.heartbeat
    assert beat.last_seen.ToDatetime(tzinfo=UTC) == datetime(2026, 12, 1, 9, 15, tzinfo=UTC)
    assert (beat.session_id, beat.surface, beat.turn_count) == ("s-1", "cli", 7)
    assert list(beat.open_loops) == ["reply to Dana"]
    assert (request.time_zone, request.session) == ("Europe/Berlin", "cli")
    assert not workspace.memory_write_request(
        Space(), "x", target="heartbeat", append=None, time_zone="", session="", heartbeat=None
    ).HasField("heartbeat")


def test_tree_comes_back_as_nested_dataclasses() -> None:
    message = workspace_pb2.MemoryTreeResponse(
        nodes=[
            workspace_pb2.TreeNode(
                name="daily/",
                path="daily/",
                children=[workspace_pb2.TreeNode(name="2026-12-01.md", path="daily/2026-12-01.md")],
            ),
            workspace_pb2.TreeNode(name="MEMORY.md", path="MEMORY.md"),
        ]
    )
    daily, memory = (workspace.tree_node(node) for node in message.nodes)
    assert daily.is_dir and not memory.is_dir
    assert [child.path for child in daily.children] == ["daily/2026-12-01.md"]
    assert daily.children[0].children == ()


def test_a_read_without_updated_at_says_none() -> None:
    read = workspace.memory_document(workspace_pb2.MemoryReadResponse(path="a.md", content="x"))
    assert read.updated_at is None
    stamped = workspace_pb2.MemoryReadResponse(path="a.md")
    stamped.updated_at.FromDatetime(datetime(2026, 12, 1, tzinfo=UTC))
    assert workspace.memory_document(stamped).updated_at == datetime(2026, 12, 1, tzinfo=UTC)


def test_memory_search_hits_are_named_results() -> None:
    found = search.memory_search_results(
        workspace_pb2.MemorySearchResponse(
            query="q",
            result_count=1,
            hits=[
                workspace_pb2.MemorySearchHit(
                    path="MEMORY.md", content="c", score=0.5, document_id="d", is_hybrid_match=True
                )
            ],
        )
    )
    assert found.results[0].path == "MEMORY.md" and found.results[0].is_hybrid_match
    assert found.result_count == 1 and not found.degraded


@pytest.mark.parametrize("family", ["search", "memory_search"])
def test_a_degraded_answer_says_how_and_how_far_behind(family: str) -> None:
    """Both searches carry the same answer state to the caller: degraded, why, the
    positions each index had not reached, and how long the search waited."""
    state = {
        "degraded": True,
        "degraded_reasons": ["vector index timed out"],
        "keyword_positions_behind": 2,
        "vector_positions_behind": 5,
        "waited_ms": 750,
    }
    if family == "search":
        found = search.search_results(search_pb2.SearchResponse(query="q", **state))
    else:
        found = search.memory_search_results(workspace_pb2.MemorySearchResponse(query="q", **state))
    assert found.degraded and found.degraded_reasons == ("vector index timed out",)
    assert (found.keyword_positions_behind, found.vector_positions_behind) == (2, 5)
    assert found.waited_ms == 750


def test_explain_is_one_line_with_code_and_reason() -> None:
    protected = ProtectedFile("SOUL.md is protected", path="SOUL.md")
    assert explain(protected) == "PERMISSION_DENIED: SOUL.md is protected [PROTECTED_FILE]"
    limited = RateLimited("20 writes a minute", retry_after_seconds=12)
    assert explain(limited) == "RESOURCE_EXHAUSTED: 20 writes a minute [RATE_LIMITED]"


async def test_client_side_mistakes_raise_before_any_call() -> None:
    with pytest.raises(InvalidArgument):
        EngramClient(retries=-1)
    with pytest.raises(InvalidArgument):
        EngramClient(timeout=0)
    async with EngramClient("127.0.0.1:1") as client:
        with pytest.raises(InvalidArgument) as bad:
            await client.search("x", mode="fuzzy")
        assert bad.value.field == "mode"
