"""The indexer's pure rules: event decoding and coalescing, retry backoff, the consumer's
configuration, reindex events, rebuilding an embedder from a model id, choosing the vector
index from settings, and the CLI's space arguments."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from nats.js.api import AckPolicy, DeliverPolicy

from engram.app.adapters import vector_index
from engram.app.config import Components, require
from engram.domain.chunks import ModelInfo
from engram.domain.documents import DocumentEvent, EventOp
from engram.domain.errors import MissingSetting
from engram.domain.spaces import parse_space_id
from engram.indexer.embedders import embedder_for_model
from engram.indexer.embedders.local import LocalOnnxEmbedder
from engram.indexer.embedders.ollama import OllamaEmbedder
from engram.indexer.embedders.openai import OpenAICompatibleEmbedder
from engram.indexer.jetstream_consumer import (
    SERVER_DELIVERY_SLACK,
    consumer_config,
    retry_delay,
)
from engram.indexer.service import REINDEX_EVENT_PREFIX, reindex_events
from engram.indexer.worker import UndecodableEvent, coalesce, read_event
from engram.indexes.vector.numpy_index import NumpyVectorIndex
from engram.indexes.vector.qdrant_index import QdrantVectorIndex
from engram.runtime.settings import Settings
from engram.v1 import space_pb2
from engram.wire import encode_event

pytestmark = pytest.mark.unit

NOTES = parse_space_id("v1:private:acme::::notes")
AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def event(path: str, version: int, *, space_id: str = NOTES.id) -> DocumentEvent:
    return DocumentEvent(
        event_id=f"e-{path}-{version}",
        space=parse_space_id(space_id),
        path=path,
        op=EventOp.UPSERT,
        version=version,
        sha256="0" * 64,
        size_bytes=3,
        at=AT,
        document_id="doc",
    )


def test_read_event_round_trips_and_refuses_garbage() -> None:
    original = event("a.md", 3)
    assert read_event(encode_event(original)) == original
    for garbage in (b"\xff\xfe not protobuf", b"", encode_event(original)[:-3]):
        with pytest.raises(UndecodableEvent):
            read_event(garbage)


def test_coalesce_groups_a_documents_events_in_first_seen_order() -> None:
    other = "v1:org:acme::::wiki"
    events = [
        event("b.md", 2),
        event("a.md", 1),
        event("b.md", 1),
        event("a.md", 1, space_id=other),
    ]
    groups = coalesce(events)
    assert list(groups) == [(NOTES.id, "b.md"), (NOTES.id, "a.md"), (other, "a.md")]
    assert [e.version for e in groups[(NOTES.id, "b.md")]] == [2, 1]


def test_retry_delay_grows_to_its_cap_with_jitter() -> None:
    random.seed(5)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10, 30.0), (40, 30.0)]:
        delays = [retry_delay(attempt, base=0.5, cap=30.0) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


def test_consumer_config_is_a_durable_explicit_ack_pull_on_every_document_subject() -> None:
    options = Components.from_settings(
        Settings(indexer_durable="idx", indexer_ack_wait_seconds=12, indexer_max_deliver=5)
    ).consumer
    config = consumer_config(options)
    assert config.durable_name == config.name == "idx"
    assert config.ack_policy is AckPolicy.EXPLICIT
    assert config.deliver_policy is DeliverPolicy.ALL
    assert config.filter_subject == "engram.docs.>"
    assert config.ack_wait == 12
    assert config.max_deliver == 5 + SERVER_DELIVERY_SLACK
    assert config.as_dict()["ack_wait"] == 12 * 10**9


def test_reindex_events_name_documents_only() -> None:
    events = reindex_events([(NOTES, "a.md"), (NOTES, "b.md")])
    assert [(e.space, e.path, e.op, e.version, e.sha256) for e in events] == [
        (NOTES, "a.md", EventOp.UPSERT, 0, ""),
        (NOTES, "b.md", EventOp.UPSERT, 0, ""),
    ]
    assert all(e.event_id.startswith(REINDEX_EVENT_PREFIX) for e in events)
    assert len({e.event_id for e in events}) == 2
    assert read_event(encode_event(events[0])) == events[0]


def test_embedders_are_rebuilt_from_model_ids() -> None:
    settings = Components.from_settings(
        Settings(openai_base_url="http://models.local", ollama_url="http://ollama.local")
    ).embedder
    local = embedder_for_model(settings, ModelInfo("minilm-l6-v2-int8", 384))
    assert isinstance(local, LocalOnnxEmbedder)
    local.close()
    hosted = embedder_for_model(settings, ModelInfo("openai:text-embedding-3-small", 1536))
    assert isinstance(hosted, OpenAICompatibleEmbedder)
    assert hosted.model == ModelInfo("openai:text-embedding-3-small", 1536)
    ollama = embedder_for_model(settings, ModelInfo("ollama:nomic-embed-text", 768))
    assert isinstance(ollama, OllamaEmbedder)
    assert ollama.model.dimension == 768
    assert embedder_for_model(settings, ModelInfo("somebody-else:model", 8)) is None
    assert embedder_for_model(settings, ModelInfo("openai", 8)) is None


async def test_the_vector_index_comes_from_settings(tmp_path: Path) -> None:
    embedded = vector_index(require(Settings(vector_dir=tmp_path / "v"), [], vector=True).vector)
    assert isinstance(embedded, NumpyVectorIndex)
    local = vector_index(
        require(
            Settings(qdrant_path=tmp_path / "q", vector_dir=tmp_path / "v"), [], vector=True
        ).vector
    )
    assert isinstance(local, QdrantVectorIndex)
    await local.close()
    with pytest.raises(MissingSetting) as caught:
        require(Settings(), [], vector=True)
    for name in ("ENGRAM_QDRANT_URL", "ENGRAM_QDRANT_PATH", "ENGRAM_VECTOR_DIR"):
        assert name in caught.value.message


def test_cli_space_arguments() -> None:
    from engram.cli.indexer_commands import space_refs
    from engram.client.mapping import space_to_proto

    refs = space_refs(["notes", "v1:project:acme:p1:::shared"], "bot", "p9", "b1", "", "")
    assert space_to_proto(refs[0]) == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_BOT, name="notes", project="p9", bot="b1"
    )
    assert space_to_proto(refs[1]) == space_pb2.SpaceRef(
        visibility=space_pb2.VISIBILITY_PROJECT, tenant="acme", project="p1", name="shared"
    )
    with pytest.raises(typer.Exit):
        space_refs(["v1:nonsense"], "private", "", "", "", "")
