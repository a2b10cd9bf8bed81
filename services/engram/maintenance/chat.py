"""A chat model behind an OpenAI-compatible `/v1/chat/completions` endpoint: OpenAI itself,
Ollama, vLLM, llama.cpp's server, or any gateway speaking the same API.

Built on the openai SDK's AsyncOpenAI (its retries with backoff, timeouts and typed errors);
its errors become ModelUnavailable, naming the server but never the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletionMessageParam

from engram.domain.dreaming import ModelUnavailable, UnusableAnswer

# The SDK refuses to start without a key; local servers (Ollama, llama.cpp) ignore it.
NO_KEY = "unused"


@dataclass(frozen=True, slots=True)
class ChatConfig:
    # The server's root (`http://127.0.0.1:11434`) or its `/v1` URL; both work.
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_seconds: float = 120.0
    # Retries of a failed call (connection errors, 408/409/429/5xx), with backoff.
    max_retries: int = 2
    # The answer's bound in tokens (the model stops there; dreaming then refuses it).
    max_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    text: str
    # "stop" when the model finished, "length" when max_tokens cut it.
    finish_reason: str


class ChatModel(Protocol):
    async def complete(self, system: str, user: str) -> ChatAnswer:
        """One chat completion; raises ModelUnavailable when the model cannot answer."""
        ...


def api_base(base_url: str) -> str:
    """The SDK's base URL: the server's `/v1`, whether or not the setting names it."""
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


class OpenAICompatibleChat:
    """Calls `POST {base}/v1/chat/completions` with a system and a user message."""

    def __init__(self, config: ChatConfig) -> None:
        self._config = config
        self._server = urlsplit(api_base(config.base_url)).netloc or config.base_url
        self._client = openai.AsyncOpenAI(
            base_url=api_base(config.base_url),
            api_key=config.api_key or NO_KEY,
            timeout=config.timeout_seconds,
            max_retries=config.max_retries,
        )

    async def complete(self, system: str, user: str) -> ChatAnswer:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        where = f"the chat model {self._config.model!r} at {self._server}"
        try:
            completion = await self._client.chat.completions.create(
                model=self._config.model,
                messages=messages,
                max_tokens=self._config.max_tokens,
            )
        except openai.APITimeoutError:
            raise ModelUnavailable(
                f"{where} did not answer within {self._config.timeout_seconds:g} s "
                "(ENGRAM_LLM_TIMEOUT_SECONDS)"
            ) from None
        except openai.APIStatusError as error:
            raise ModelUnavailable(
                f"{where} answered HTTP {error.status_code}: {_short(error.message)}"
            ) from None
        except openai.APIConnectionError:
            raise ModelUnavailable(f"{where} could not be reached") from None
        except openai.OpenAIError as error:
            raise ModelUnavailable(f"{where} failed: {type(error).__name__}") from None
        if not completion.choices:
            raise UnusableAnswer(f"{where} answered no choice")
        choice = completion.choices[0]
        return ChatAnswer(
            text=choice.message.content or "", finish_reason=str(choice.finish_reason or "")
        )

    async def close(self) -> None:
        await self._client.close()


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."
