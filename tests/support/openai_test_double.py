"""A test double for a hosted chat model: a real HTTP server on 127.0.0.1 speaking the
OpenAI-compatible `POST /v1/chat/completions` API, so the client under test goes through its
real SDK, HTTP stack, retries and timeouts.

Answers are scripted (`script(...)`: a reply, an HTTP failure, a stall past the client's
timeout); every request is recorded; `hold()` makes the next request wait until the test
releases it (to change the store while the model is "thinking"). Bounded: request bodies
over MAX_BODY_BYTES are refused, and a held or stalled request waits at most
MAX_WAIT_SECONDS.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_WAIT_SECONDS = 60.0


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


Step = ChatReply | HttpFailure | Stall


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
    """Serves until `stop()`; use as a context manager. `base_url` is its root."""

    def __init__(self, *, api_key: str | None = None, default: Step | None = None) -> None:
        self._api_key = api_key
        self._default = default or ChatReply("NOTHING_TO_PROMOTE")
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
        if handler.path.rstrip("/") != "/v1/chat/completions":
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
        if isinstance(step, HttpFailure):
            self._send(handler, step.status, _error(step.message))
            return
        if isinstance(step, Stall):
            self._stopping.wait(min(step.seconds, MAX_WAIT_SECONDS))
            step = step.then
        self._send(handler, 200, _completion(str(body.get("model", "")), step))

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
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
