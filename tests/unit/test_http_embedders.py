"""The HTTP embedders against small local servers that imitate the providers' APIs.

OpenAI's API is a hosted third party and no Ollama binary can be had here, so each is
imitated by a mock HTTP server (named so) speaking the documented request and response
shapes over real sockets on 127.0.0.1; the query micro-batching tests use the shared
OpenAI-compatible test double (tests/support/openai_test_double.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from engram.app.config import Components
from engram.domain.chunks import ModelInfo
from engram.indexer.embedders import configured_embedder, embedder_for_model
from engram.indexer.embedders.http import QUERY_POSTS_IN_FLIGHT, QueryBatching
from engram.indexer.embedders.local import DIMENSION
from engram.indexer.embedders.ollama import OllamaEmbedder
from engram.indexer.embedders.openai import OpenAICompatibleEmbedder
from engram.indexer.embedding_cache import CachedEmbedder, SqliteEmbeddingCache
from engram.indexes.ports import IndexUnavailable
from engram.runtime.settings import Settings
from tests.support.openai_test_double import (
    EMBEDDINGS_PATH,
    HttpFailure,
    OpenAICompatibleTestDouble,
    RawReply,
    embedding_for,
)


def raw_vector(text: str, dimension: int) -> list[float]:
    """A deterministic, deliberately unnormalised vector for `text`."""
    base = float(len(text) + 1)
    return [base * (i + 1) + (sum(map(ord, text)) % 7) for i in range(dimension)]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out hangs up before the delayed answer: expected here.
        pass


@dataclass
class _MockServer:
    """A threaded HTTP server that records requests and plays scripted failures first."""

    dimension: int = 3
    # Answered in order before normal service: (status, body, headers).
    script: list[tuple[int, bytes, dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                owner.requests.append(
                    Recorded(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                if owner.delay:
                    time.sleep(owner.delay)
                if owner.script:
                    status, payload, headers = owner.script.pop(0)
                else:
                    status, payload, headers = owner.answer(self.path, body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, path: str, body: Any) -> tuple[int, bytes, dict[str, str]]:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class MockOpenAIEmbeddingsServer(_MockServer):
    """Imitates `POST /v1/embeddings`, answering `data` in reverse order (the API allows
    any order; `index` says which input each row is)."""

    def answer(self, path: str, body: Any) -> tuple[int, bytes, dict[str, str]]:
        if path != "/v1/embeddings":
            return 404, b'{"error": {"message": "not found"}}', {}
        data = [
            {"object": "embedding", "index": i, "embedding": raw_vector(text, self.dimension)}
            for i, text in enumerate(body["input"])
        ]
        payload = {"object": "list", "data": data[::-1], "model": body["model"], "usage": {}}
        return 200, json.dumps(payload).encode(), {}


class MockOllamaServer(_MockServer):
    """Imitates Ollama's `POST /api/embed`."""

    def answer(self, path: str, body: Any) -> tuple[int, bytes, dict[str, str]]:
        if path != "/api/embed":
            return 404, b'{"error": "not found"}', {}
        payload = {
            "model": body["model"],
            "embeddings": [raw_vector(text, self.dimension) for text in body["input"]],
        }
        return 200, json.dumps(payload).encode(), {}


@pytest.fixture
def openai_server() -> Iterator[MockOpenAIEmbeddingsServer]:
    server = MockOpenAIEmbeddingsServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ollama_server() -> Iterator[MockOllamaServer]:
    server = MockOllamaServer()
    server.start()
    yield server
    server.stop()


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def expected(texts: list[str], dimension: int = 3) -> np.ndarray:
    raw = np.array([raw_vector(t, dimension) for t in texts], dtype=np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


# --- OpenAI-compatible ----------------------------------------------------------------------


async def test_openai_request_shape_auth_and_batching(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url + "/",
        model="text-embedding-3-small",
        api_key="sk-test",
        batch_size=2,
    )
    texts = ["one", "two two", "three", "four", "five five five"]
    vectors = await embedder.embed_documents(texts)
    await embedder.aclose()

    assert [r.path for r in openai_server.requests] == ["/v1/embeddings"] * 3
    assert [r.body["input"] for r in openai_server.requests] == [
        ["one", "two two"],
        ["three", "four"],
        ["five five five"],
    ]
    for request in openai_server.requests:
        assert request.body["model"] == "text-embedding-3-small"
        assert set(request.body) == {"model", "input"}
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["content-type"] == "application/json"
    # In input order despite the reversed answer, and unit length.
    assert np.allclose(vectors, expected(texts), atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)


async def test_openai_dimension_is_discovered_or_checked(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    discovering = OpenAICompatibleEmbedder(base_url=openai_server.url, model="m")
    with pytest.raises(IndexUnavailable, match="ENGRAM_OPENAI_DIMENSION"):
        _ = discovering.model
    info = await discovering.probe()
    assert (info.model_id, info.dimension) == ("openai:m", 3)
    assert "authorization" not in openai_server.requests[0].headers
    query = await discovering.embed_query("hello")
    assert query.shape == (3,)
    await discovering.aclose()

    wrong = OpenAICompatibleEmbedder(base_url=openai_server.url, model="m", dimension=1536)
    assert wrong.model.dimension == 1536
    with pytest.raises(IndexUnavailable, match="returned 3 dimensions, expected 1536"):
        await wrong.embed_documents(["x"])
    await wrong.aclose()


async def test_openai_retries_rate_limits_and_server_errors(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    openai_server.script = [
        (429, b'{"error": {"message": "slow down"}}', {"retry-after": "0"}),
        (503, b"overloaded", {}),
    ]
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", base_backoff=0.01, max_retries=3
    )
    vectors = await embedder.embed_documents(["a", "b"])
    await embedder.aclose()
    assert len(openai_server.requests) == 3
    assert np.allclose(vectors, expected(["a", "b"]), atol=1e-6)


async def test_a_retry_waits_as_long_as_retry_after_asks(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    # The own backoff would be ~1 ms; the provider's Retry-After wins.
    openai_server.script = [(429, b"slow down", {"retry-after": "0.4"})]
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", base_backoff=0.001, max_retries=1
    )
    await embedder.embed_documents(["a"])
    await embedder.aclose()
    first, second = openai_server.requests
    assert second.at - first.at >= 0.4


async def test_openai_gives_up_after_the_retries(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    openai_server.script = [(500, b"boom", {})] * 5
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", base_backoff=0.01, max_retries=2
    )
    with pytest.raises(IndexUnavailable, match=r"HTTP 500.*3 attempts"):
        await embedder.embed_documents(["a"])
    await embedder.aclose()
    assert len(openai_server.requests) == 3


async def test_openai_client_errors_are_not_retried(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    openai_server.script = [(401, b'{"error": {"message": "Incorrect API key"}}', {})]
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", api_key="sk-wrong", base_backoff=0.01
    )
    with pytest.raises(IndexUnavailable, match="HTTP 401") as raised:
        await embedder.embed_documents(["a"])
    assert "sk-wrong" not in str(raised.value)
    await embedder.aclose()
    assert len(openai_server.requests) == 1


async def test_openai_malformed_answers_are_unavailable(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    embedder = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", base_backoff=0.01, max_retries=0
    )
    openai_server.script = [(200, b"not json", {})]
    with pytest.raises(IndexUnavailable, match="invalid JSON"):
        await embedder.embed_documents(["a"])
    openai_server.script = [(200, b'{"data": [{"index": 0, "embedding": [1, 2]}]}', {})]
    with pytest.raises(IndexUnavailable, match="asked for 2 vectors"):
        await embedder.embed_documents(["a", "b"])
    openai_server.script = [(200, b'{"object": "list"}', {})]
    with pytest.raises(IndexUnavailable, match="unexpected response shape"):
        await embedder.embed_documents(["a"])
    await embedder.aclose()


async def test_openai_connection_errors_and_timeouts(
    openai_server: MockOpenAIEmbeddingsServer,
) -> None:
    refused = OpenAICompatibleEmbedder(
        base_url=closed_port_url(), model="m", base_backoff=0.01, max_retries=1
    )
    with pytest.raises(IndexUnavailable, match="cannot reach"):
        await refused.embed_documents(["a"])
    await refused.aclose()

    openai_server.delay = 0.5
    slow = OpenAICompatibleEmbedder(
        base_url=openai_server.url, model="m", timeout=0.1, base_backoff=0.01, max_retries=0
    )
    with pytest.raises(IndexUnavailable, match="timed out"):
        await slow.embed_documents(["a"])
    await slow.aclose()


async def test_cached_embedder_learns_the_model_id_from_the_first_answer(
    openai_server: MockOpenAIEmbeddingsServer, tmp_path: Any
) -> None:
    from engram.backends.sqlite import SqliteDatabase
    from engram.indexer.embedding_cache import SCHEMA

    db = SqliteDatabase(tmp_path / "c.sqlite3")
    await db.open([SCHEMA])
    embedder = OpenAICompatibleEmbedder(base_url=openai_server.url, model="m")
    cached = CachedEmbedder(embedder, SqliteEmbeddingCache(db))
    first = await cached.embed_documents(["a", "b"])
    second = await cached.embed_documents(["b", "a", "c"])
    assert cached.embedded_texts == 3
    assert len(openai_server.requests) == 2
    assert np.array_equal(second[:2], first[::-1])
    await embedder.aclose()
    await db.close()


# --- Ollama ---------------------------------------------------------------------------------


async def test_ollama_request_shape_batching_and_normalisation(
    ollama_server: MockOllamaServer,
) -> None:
    ollama_server.dimension = 5
    embedder = OllamaEmbedder(url=ollama_server.url, model="nomic-embed-text", batch_size=3)
    texts = [f"text number {n}" for n in range(7)]
    vectors = await embedder.embed_documents(texts)
    assert embedder.model.model_id == "ollama:nomic-embed-text"
    assert embedder.model.dimension == 5
    await embedder.aclose()
    assert [r.path for r in ollama_server.requests] == ["/api/embed"] * 3
    assert [len(r.body["input"]) for r in ollama_server.requests] == [3, 3, 1]
    assert all(r.body["model"] == "nomic-embed-text" for r in ollama_server.requests)
    assert all("authorization" not in r.headers for r in ollama_server.requests)
    assert np.allclose(vectors, expected(texts, 5), atol=1e-6)


async def test_ollama_errors_are_mapped(ollama_server: MockOllamaServer) -> None:
    ollama_server.script = [(500, b'{"error": "model is loading"}', {})]
    embedder = OllamaEmbedder(url=ollama_server.url, model="m", base_backoff=0.01)
    assert (await embedder.embed_query("q")).shape == (3,)
    assert len(ollama_server.requests) == 2
    ollama_server.script = [(404, b'{"error": "model \\"m\\" not found"}', {})]
    with pytest.raises(IndexUnavailable, match="HTTP 404"):
        await embedder.embed_documents(["a"])
    await embedder.aclose()

    refused = OllamaEmbedder(url=closed_port_url(), model="m", max_retries=0)
    with pytest.raises(IndexUnavailable, match="cannot reach Ollama"):
        await refused.embed_documents(["a"])
    await refused.aclose()


def test_configured_embedder_follows_the_provider_setting() -> None:
    openai = _build(
        Settings(
            embedder_provider="openai",
            openai_base_url="http://127.0.0.1:1",
            openai_model="e5",
            openai_dimension=768,
            openai_api_key="sk-x",
        )
    )
    assert isinstance(openai, OpenAICompatibleEmbedder)
    assert (openai.model.model_id, openai.model.dimension) == ("openai:e5", 768)
    ollama = _build(Settings(embedder_provider="ollama", ollama_model="bge-m3"))
    assert isinstance(ollama, OllamaEmbedder)
    with pytest.raises(IndexUnavailable):
        _ = ollama.model
    assert DIMENSION == 384


def _build(settings: Settings) -> object:
    return configured_embedder(Components.from_settings(settings).embedder)


# --- Micro-batching of concurrent queries -----------------------------------------------------
#
# Against OpenAICompatibleTestDouble (tests/support), whose embeddings depend on the text, so
# a row handed to the wrong caller fails the comparison. asyncio.gather starts every query
# before the batcher's drain task first runs, so all of them are queued when the first POST
# is formed: the counts below do not depend on timing.


@pytest.fixture
def model_double() -> Iterator[OpenAICompatibleTestDouble]:
    with OpenAICompatibleTestDouble() as double:
        yield double


def unit(text: str, dimension: int = 8) -> np.ndarray:
    raw = np.asarray(embedding_for(text, dimension), dtype=np.float32)
    normalised: np.ndarray = raw / np.linalg.norm(raw)
    return normalised


def double_embedder(
    double: OpenAICompatibleTestDouble,
    *,
    window: float = 0.002,
    max_batch: int = 32,
    batch_size: int = 128,
    max_retries: int = 4,
) -> OpenAICompatibleEmbedder:
    return OpenAICompatibleEmbedder(
        base_url=double.base_url,
        model="m",
        dimension=8,
        batch_size=batch_size,
        base_backoff=0.01,
        max_retries=max_retries,
        queries=QueryBatching(window=window, max_batch=max_batch),
    )


async def embed_concurrently(embedder: OpenAICompatibleEmbedder, texts: list[str]) -> list[Any]:
    return list(
        await asyncio.gather(*(embedder.embed_query(t) for t in texts), return_exceptions=True)
    )


HELD_POST_WAIT_SECONDS = 20.0
QUERIES = [f"query number {n} about {'x' * n}" for n in range(16)]


@pytest.mark.parametrize("window", [0.002, 0.0], ids=["window-2ms", "window-0"])
async def test_concurrent_queries_share_posts_and_each_gets_its_own_row(
    model_double: OpenAICompatibleTestDouble, window: float
) -> None:
    embedder = double_embedder(model_double, window=window)
    rows = await embed_concurrently(embedder, QUERIES)
    await embedder.aclose()

    posts = model_double.requests_to(EMBEDDINGS_PATH)
    assert 1 <= len(posts) <= 4, [p.body["input"] for p in posts]
    assert sorted(t for p in posts for t in p.body["input"]) == sorted(QUERIES)
    for text, row in zip(QUERIES, rows, strict=True):
        assert isinstance(row, np.ndarray), row
        assert row.shape == (8,)
        assert np.allclose(row, unit(text), atol=1e-6), text


async def test_a_post_carries_at_most_max_batch_and_batch_size_queries(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    for max_batch, batch_size in ((5, 128), (32, 3)):
        embedder = double_embedder(model_double, max_batch=max_batch, batch_size=batch_size)
        before = len(model_double.requests_to(EMBEDDINGS_PATH))
        rows = await embed_concurrently(embedder, QUERIES)
        await embedder.aclose()
        posts = model_double.requests_to(EMBEDDINGS_PATH)[before:]
        limit = min(max_batch, batch_size)
        assert all(1 <= len(p.body["input"]) <= limit for p in posts)
        assert len(posts) < len(QUERIES), "still batched"
        assert all(np.allclose(r, unit(t), atol=1e-6) for t, r in zip(QUERIES, rows, strict=True))


async def held_posts_in_flight(
    double: OpenAICompatibleTestDouble, embedder: OpenAICompatibleEmbedder, posts: int
) -> list[Any]:
    """Holds the next `posts` POSTs at the double, checks that all of them arrive (so they
    are in flight together), then lets the 16 queries finish and returns their rows."""
    gates = [double.hold() for _ in range(posts)]
    pending = asyncio.gather(*(embedder.embed_query(t) for t in QUERIES), return_exceptions=True)
    arrived = 0
    try:
        for gate in gates:
            # Bounded: a POST that cannot be sent before the held ones are answered never
            # arrives.
            if not await asyncio.to_thread(gate.entered.wait, HELD_POST_WAIT_SECONDS):
                break
            arrived += 1
    finally:
        for gate in gates:
            gate.release()
    rows = list(await asyncio.wait_for(pending, timeout=30))
    assert arrived == posts, f"only {arrived} of {posts} POSTs were in flight together"
    return rows


async def test_batching_off_sends_every_query_at_once_in_its_own_post(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    embedder = double_embedder(model_double, window=0.0, max_batch=1)
    rows = await held_posts_in_flight(model_double, embedder, len(QUERIES))
    await embedder.aclose()
    posts = model_double.requests_to(EMBEDDINGS_PATH)
    assert [len(p.body["input"]) for p in posts] == [1] * len(QUERIES)
    assert all(np.allclose(r, unit(t), atol=1e-6) for t, r in zip(QUERIES, rows, strict=True))


async def test_several_shared_posts_are_in_flight_at_once(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    # 16 queries, 4 per POST: all four POSTs reach the provider before any is answered.
    embedder = double_embedder(model_double, max_batch=4)
    rows = await held_posts_in_flight(model_double, embedder, QUERY_POSTS_IN_FLIGHT)
    await embedder.aclose()
    posts = model_double.requests_to(EMBEDDINGS_PATH)
    assert [len(p.body["input"]) for p in posts] == [4] * 4
    assert all(np.allclose(r, unit(t), atol=1e-6) for t, r in zip(QUERIES, rows, strict=True))


async def test_a_lone_query_is_one_post_of_one_text(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    embedder = double_embedder(model_double)
    row = await embedder.embed_query("just me")
    await embedder.aclose()
    (post,) = model_double.requests_to(EMBEDDINGS_PATH)
    assert post.body == {"model": "m", "input": ["just me"]}
    assert np.allclose(row, unit("just me"), atol=1e-6)


async def test_a_failed_post_fails_each_of_its_queries_and_the_next_query_succeeds(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    embedder = double_embedder(model_double, max_retries=1)

    # What a lone query gets when the provider keeps failing ...
    model_double.script(HttpFailure(500), HttpFailure(500))
    with pytest.raises(IndexUnavailable, match=r"HTTP 500.*2 attempts") as lone:
        await embedder.embed_query("alone")
    # ... is what every query of a shared POST gets.
    model_double.script(HttpFailure(500), HttpFailure(500))
    failed = await embed_concurrently(embedder, QUERIES)
    assert all(isinstance(f, IndexUnavailable) for f in failed), failed
    assert {str(f) for f in failed} == {str(lone.value)}
    assert len(model_double.requests_to(EMBEDDINGS_PATH)) == 4, "one shared POST, retried once"

    # A malformed reply (not retried) likewise fails the whole batch.
    for reply, problem in (
        (RawReply(b'{"object": "list"}'), "unexpected response shape"),
        (RawReply(b"not json"), "invalid JSON"),
        (
            RawReply(json.dumps({"data": [{"index": 0, "embedding": [1.0] * 8}]}).encode()),
            f"asked for {len(QUERIES)} vectors",
        ),
    ):
        model_double.script(reply)
        failed = await embed_concurrently(embedder, QUERIES)
        assert all(isinstance(f, IndexUnavailable) for f in failed), failed
        assert all(problem in str(f) for f in failed), failed

    # The next queries are answered.
    rows = await embed_concurrently(embedder, QUERIES[:3])
    assert all(np.allclose(r, unit(t), atol=1e-6) for t, r in zip(QUERIES[:3], rows, strict=True))
    await embedder.aclose()


async def test_closing_the_embedder_fails_the_queries_in_flight(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    embedder = double_embedder(model_double)
    gate = model_double.hold()
    pending = asyncio.gather(
        *(embedder.embed_query(t) for t in QUERIES[:3]), return_exceptions=True
    )
    await gate.wait_entered()
    await embedder.aclose()
    gate.release()
    failed = await asyncio.wait_for(pending, timeout=10)
    assert all(isinstance(f, IndexUnavailable) for f in failed), failed
    assert all("closed" in str(f) for f in failed), failed


async def test_ollama_queries_share_posts_too(ollama_server: MockOllamaServer) -> None:
    embedder = OllamaEmbedder(url=ollama_server.url, model="m", queries=QueryBatching(window=0.002))
    texts = [f"t{n}" for n in range(16)]
    rows = await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    await embedder.aclose()
    assert 1 <= len(ollama_server.requests) <= 4
    assert np.allclose(np.stack(rows), expected(texts), atol=1e-6)


async def test_search_settings_reach_the_http_query_embedder(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    settings = Settings(
        embedder_provider="openai",
        openai_base_url=model_double.base_url,
        openai_model="m",
        openai_dimension=8,
        search_embed_batch_window_ms=3,
        search_embed_max_batch=4,
    )
    config = Components.from_settings(settings).query_embedder
    embedder = embedder_for_model(config, ModelInfo("openai:m", 8))
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    rows = await embed_concurrently(embedder, QUERIES)
    await embedder.aclose()
    posts = model_double.requests_to(EMBEDDINGS_PATH)
    assert [len(p.body["input"]) for p in posts] == [4, 4, 4, 4]
    assert all(np.allclose(r, unit(t), atol=1e-6) for t, r in zip(QUERIES, rows, strict=True))


async def test_a_post_whose_queries_all_gave_up_is_cancelled_and_frees_its_slot(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    # One POST slot. Its POST is held at the double; its callers give up (as search's
    # deadline does); the next query must get the slot instead of waiting behind a POST
    # nobody waits for.
    embedder = OpenAICompatibleEmbedder(
        base_url=model_double.base_url,
        model="m",
        dimension=8,
        queries=QueryBatching(window=0.0, max_batch=8, posts_in_flight=1),
    )
    gate = model_double.hold()
    callers = [asyncio.ensure_future(embedder.embed_query(t)) for t in QUERIES[:3]]
    try:
        assert await asyncio.to_thread(gate.entered.wait, HELD_POST_WAIT_SECONDS)
        for caller in callers:
            caller.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        # Bounded: without the cancellation this waits for the held POST (the double's
        # hold bound, 60 s) and fails here.
        row = await asyncio.wait_for(embedder.embed_query("next"), HELD_POST_WAIT_SECONDS)
    finally:
        gate.release()
        await embedder.aclose()
    assert np.allclose(row, unit("next"), atol=1e-6)
    assert [p.body["input"] for p in model_double.requests_to(EMBEDDINGS_PATH)] == [
        QUERIES[:3],
        ["next"],
    ]


async def test_a_post_is_kept_while_one_of_its_queries_still_waits(
    model_double: OpenAICompatibleTestDouble,
) -> None:
    embedder = double_embedder(model_double)
    gate = model_double.hold()
    callers = [asyncio.ensure_future(embedder.embed_query(t)) for t in QUERIES[:3]]
    try:
        assert await asyncio.to_thread(gate.entered.wait, HELD_POST_WAIT_SECONDS)
        callers[0].cancel()
        callers[1].cancel()
    finally:
        gate.release()
    row = await asyncio.wait_for(callers[2], 30)
    await embedder.aclose()
    assert np.allclose(row, unit(QUERIES[2]), atol=1e-6)
    assert callers[0].cancelled() and callers[1].cancelled()
    assert len(model_double.requests_to(EMBEDDINGS_PATH)) == 1
