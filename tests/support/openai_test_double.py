"""A test double for a hosted model: a real HTTP server on 127.0.0.1 speaking the
OpenAI-compatible `POST /v1/chat/completions` and `POST /v1/embeddings` APIs, so the client
under test goes through its real SDK, HTTP stack, retries and timeouts.

Answers are scripted (`script(...)`: a reply, an HTTP failure, a raw body, a stall past the
client's timeout); every request is recorded; `hold()` makes the next request wait until the
test releases it (to change the store while the model is "thinking"); `delay` makes every
request take that long, like a hosted model's round trip. Embeddings are `embedding_for(text)`:
deterministic, different for different texts (so a reply given to the wrong caller shows),
deliberately not unit length. Bounded: request bodies over MAX_BODY_BYTES are refused, and a
held, delayed or stalled request waits at most MAX_WAIT_SECONDS.

`python -m tests.support.openai_test_double [--delay-ms 20]` serves it in its own process (for
bench/http_embed_bench.py): it prints its base URL, then serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_WAIT_SECONDS = 60.0
CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"


def embedding_for(text: str, dimension: int = 8) -> list[float]:
    """The double's (unnormalised) embedding of `text`: bytes of its SHA-256, centred."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(digest[i % len(digest)]) - 127.5 for i in range(dimension)]


@dataclass(frozen=True)
class ChatReply:
    """A completion whose message is `content`."""

    content: str
    finish_reason: str = "stop"


@dataclass(frozen=True)
class HttpFailure:
    """An error status with an OpenAI-shaped error body."""

    status: int
    message: str = "scripted failure"


@dataclass(frozen=True)
class Stall:
    """Answers `then` only after `seconds` (longer than the client waits)."""

    seconds: float
    then: ChatReply = ChatReply("NOTHING_TO_PROMOTE")


@dataclass(frozen=True)
class RawReply:
    """Answers `body` as it is, with `status` (e.g. a malformed 200)."""

    body: bytes
    status: int = 200


Step = ChatReply | HttpFailure | Stall | RawReply


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def user_message(self) -> str:
        return "\n".join(
            str(m.get("content", "")) for m in self.body.get("messages", []) if m["role"] == "user"
        )


@dataclass
class Gate:
    """A held request: `entered` is set when it arrives, it answers once released."""

    entered: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    async def wait_entered(self) -> None:
        if not await asyncio.to_thread(self.entered.wait, MAX_WAIT_SECONDS):
            raise TimeoutError("no request reached the held chat model")

    def release(self) -> None:
        self.released.set()


class OpenAICompatibleTestDouble:
    """Serves until `stop()`; use as a context manager. `base_url` is its root.

    On the embeddings route a ChatReply step (the default) means a normal answer."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        default: Step | None = None,
        delay: float = 0.0,
        embedding_dimension: int = 8,
    ) -> None:
        self._api_key = api_key
        self._default = default or ChatReply("NOTHING_TO_PROMOTE")
        self._delay = min(delay, MAX_WAIT_SECONDS)
        self.embedding_dimension = embedding_dimension
        self._steps: deque[Step] = deque()
        self._gates: deque[Gate] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="openai-test-double", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> OpenAICompatibleTestDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            for gate in self._gates:
                gate.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The requests recorded so far on `path` (e.g. EMBEDDINGS_PATH)."""
        with self._lock:
            return [request for request in self.requests if request.path.rstrip("/") == path]

    def script(self, *steps: Step) -> None:
        """Answers the next requests with `steps`, in order; then with the default."""
        with self._lock:
            self._steps.extend(steps)

    def hold(self) -> Gate:
        """The next request waits until the returned gate is released."""
        gate = Gate()
        with self._lock:
            self._gates.append(gate)
        return gate

    def _next(self) -> tuple[Step, Gate | None]:
        with self._lock:
            step = self._steps.popleft() if self._steps else self._default
            gate = self._gates.popleft() if self._gates else None
        return step, gate

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle's algorithm the body
            # waits for the client's delayed ACK (~40 ms per answer on Linux).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return  # quiet

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                double._serve(self)

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(handler, 413, _error("request body too large"))
            return
        raw = handler.rfile.read(length)
        path = handler.path.rstrip("/")
        if path not in (CHAT_PATH, EMBEDDINGS_PATH):
            self._send(handler, 404, _error(f"no route {handler.path}"))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(handler, 400, _error("body is not JSON"))
            return
        headers = {key.lower(): value for key, value in handler.headers.items()}
        with self._lock:
            self.requests.append(RecordedRequest(handler.path, headers, body))
        if self._api_key is not None and headers.get("authorization") != f"Bearer {self._api_key}":
            self._send(handler, 401, _error("invalid api key"))
            return
        step, gate = self._next()
        if gate is not None:
            gate.entered.set()
            gate.released.wait(MAX_WAIT_SECONDS)
        if self._delay > 0:
            self._stopping.wait(self._delay)
        if isinstance(step, HttpFailure):
            self._send(handler, step.status, _error(step.message))
            return
        if isinstance(step, RawReply):
            self._send(handler, step.status, step.body)
            return
        if isinstance(step, Stall):
            self._stopping.wait(min(step.seconds, MAX_WAIT_SECONDS))
            step = step.then
        if path == EMBEDDINGS_PATH:
            self._send(handler, 200, self._embeddings(body))
            return
        self._send(handler, 200, _completion(str(body.get("model", "")), step))

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": embedding_for(str(text), self.embedding_dimension),
            }
            for i, text in enumerate(texts)
        ]
        # In reverse order: the API allows any order, each row carries its input's index.
        return {
            "object": "list",
            "data": data[::-1],
            "model": str(body.get("model", "")),
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any] | bytes
    ) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to answer


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "test_double_error", "code": None}}


def _completion(model: str, reply: ChatReply) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test-double",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="every request's delay")
    parser.add_argument("--dimension", type=int, default=8, help="embedding dimension")
    args = parser.parse_args(argv)
    with OpenAICompatibleTestDouble(
        delay=args.delay_ms / 1000, embedding_dimension=args.dimension
    ) as double:
        print(double.base_url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin (or exits)


if __name__ == "__main__":
    main()
