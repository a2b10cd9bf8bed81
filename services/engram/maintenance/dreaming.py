"""Dreaming: the maintenance job that consolidates a space's daily logs into MEMORY.md.

One run reads the new parts of the daily logs (past the space's watermark, at most
`max_input_chars`) and MEMORY.md, asks the chat model for the durable facts MEMORY.md does
not hold yet, and appends them as a `## Dreamed YYYY-MM-DD` section: an append with the
etag read before the call, so an operator's edit made meanwhile is never overwritten (on
ABORTED it re-reads and appends after it). The watermark advances only once the section is
written, or when the model answers NOTHING_TO_PROMOTE; a failed call or write leaves it,
and the next run sends the same logs again. Each section carries its input's key: a run
that stopped between the write and the watermark is finished by the next without a second
section.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from importlib import resources
from typing import ClassVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from engram.domain.dreaming import (
    LogExcerpt,
    LogMark,
    PromptTemplate,
    Watermark,
    advanced_marks,
    already_dreamed,
    dream_key,
    dream_logs,
    dreamed_section,
    parse_prompt_template,
    promoted_text,
    render_prompt,
    take_excerpt,
)
from engram.domain.errors import DocumentNotFound, EtagMismatch, Misconfigured
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.policy import decide
from engram.domain.principals import Action, Principal
from engram.domain.spaces import SpaceRef
from engram.domain.workspace import JOURNAL_DIRS, MEMORY_PATH
from engram.maintenance.chat import ChatModel
from engram.maintenance.dream_watermarks import WatermarkStore
from engram.maintenance.ports import MaintenanceStorage

PROMPT_VERSION = "dream-v1"
DEFAULT_INTERVAL = timedelta(hours=24)
DEFAULT_MAX_INPUT_CHARS = 48_000
DEFAULT_MAX_ANSWER_CHARS = 16_000
DEFAULT_MAX_MEMORY_CHARS = 32_000
# Appends that lost to an edit of MEMORY.md before the run gives up (and retries next time).
WRITE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class DreamConfig:
    # The worker's switch (ENGRAM_DREAM_ENABLED); a space also opts in (dream_enabled).
    enabled: bool = False
    interval: timedelta = DEFAULT_INTERVAL
    # Characters of daily logs sent per run; the rest waits for the next run.
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    # Characters of MEMORY.md sent with them (its end when it is longer).
    max_memory_chars: int = DEFAULT_MAX_MEMORY_CHARS
    # The longest answer appended to MEMORY.md.
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS
    prompt_version: str = PROMPT_VERSION


def load_prompt(version: str = PROMPT_VERSION) -> PromptTemplate:
    """The packaged template `prompts/<version>.md`."""
    text = resources.files("engram.maintenance").joinpath("prompts", f"{version}.md").read_text()
    return parse_prompt_template(version, text)


@dataclass(frozen=True, slots=True)
class _Memory:
    content: str
    # "" when MEMORY.md does not exist.
    sha256: str


class DreamJob:
    """Implements the maintenance `Job` protocol as "dream"."""

    name: ClassVar[str] = "dream"

    def __init__(
        self,
        storage: MaintenanceStorage,
        principal: Principal,
        watermarks: WatermarkStore,
        model: ChatModel | None,
        config: DreamConfig,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        self._storage = storage
        self._principal = principal
        self._watermarks = watermarks
        self._model = model
        self._config = config
        self._clock = clock
        self._prompt = load_prompt(config.prompt_version)

    # The space's settings are `chosen` here: the settings-reference test reads every
    # `settings.<name>` as a read of the process settings, and dream_enabled is both.
    def scheduled(self, chosen: SpaceSettings) -> bool:
        return self._config.enabled and chosen.dream_enabled

    def interval(self, chosen: SpaceSettings) -> timedelta:
        return self._config.interval

    async def run(self, space: SpaceRef, chosen: SpaceSettings) -> JobReport:
        if self._model is None:
            raise Misconfigured(
                "dreaming needs a chat model: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL on "
                "the maintenance worker"
            )
        # Refused up front (a global space needs a platform admin), not after the model call.
        decide(self._principal, Action.WRITE, space).require()
        watermark = await self._watermarks.load(space.id)
        listed = await self._daily_logs(space)
        excerpts, sent = await self._excerpts(space, listed, watermark)
        counts = {
            "logs_sent": len(excerpts),
            "chars_sent": sum(len(excerpt.text) for excerpt in excerpts),
            "sections_written": 0,
            "bytes_appended": 0,
        }
        details = tuple(f"{e.path} [{e.start}, {e.end})" for e in excerpts)
        marks = advanced_marks(watermark, listed, sent)
        if not excerpts:
            if marks != dict(watermark.logs):  # marks of deleted or archived logs dropped
                await self._advance(space, watermark, marks)
            return JobReport(counts=counts, message="no new daily log content")
        key = dream_key(excerpts)
        memory = await self._read_memory(space)
        version = self._prompt.version
        if already_dreamed(memory.content, key, version):
            await self._advance(space, watermark, marks)
            return JobReport(
                counts=counts,
                message="MEMORY.md already holds this input's section (a run stopped before "
                "recording it); watermark advanced",
                details=details,
            )
        today = self._clock().date()
        system, user = render_prompt(
            self._prompt,
            memory=memory.content,
            excerpts=excerpts,
            today=today,
            max_memory_chars=self._config.max_memory_chars,
        )
        answer = await self._model.complete(system, user)
        facts = promoted_text(
            answer.text,
            finish_reason=answer.finish_reason,
            max_chars=self._config.max_answer_chars,
        )
        if facts is None:
            await self._advance(space, watermark, marks)
            return JobReport(
                counts=counts, message="nothing to promote; watermark advanced", details=details
            )
        appended = await self._append(space, memory, key, facts)
        await self._advance(space, watermark, marks)
        counts["sections_written"] = 1 if appended else 0
        counts["bytes_appended"] = appended
        message = (
            f"appended a Dreamed section to {MEMORY_PATH}"
            if appended
            else (f"{MEMORY_PATH} already held this input's section; watermark advanced")
        )
        return JobReport(counts=counts, message=message, details=details)

    async def _daily_logs(self, space: SpaceRef) -> list[str]:
        """The logs of `daily/` and of `memory/` (the OpenClaw/Minara layout)."""
        paths: list[str] = []
        for directory in JOURNAL_DIRS:
            async for entry in self._storage.list_paths(space, directory, recursive=False):
                paths.append(entry.path)
        return dream_logs(paths)

    async def _excerpts(
        self, space: SpaceRef, logs: list[str], watermark: Watermark
    ) -> tuple[list[LogExcerpt], dict[str, LogMark]]:
        """The new parts of the logs, oldest first, within the input budget; logs past the
        budget are not read."""
        budget = self._config.max_input_chars
        excerpts: list[LogExcerpt] = []
        sent: dict[str, LogMark] = {}
        for path in logs:
            try:
                document = await self._storage.read(space, path)
            except DocumentNotFound:
                continue  # deleted since the listing; its mark goes with it
            # Hashing a long log's prefix is CPU work: off the event loop.
            taken = await asyncio.to_thread(
                partial(take_excerpt, split_line=not excerpts),
                path,
                document.content,
                watermark.logs.get(path),
                budget,
            )
            if taken.excerpt is not None and taken.mark is not None:
                excerpts.append(taken.excerpt)
                sent[path] = taken.mark
                budget -= len(taken.excerpt.text)
            if not taken.complete:
                break  # the budget is spent: later logs wait for the next run, in order
        return excerpts, sent

    async def _read_memory(self, space: SpaceRef) -> _Memory:
        try:
            document = await self._storage.read(space, MEMORY_PATH)
        except DocumentNotFound:
            return _Memory(content="", sha256="")
        return _Memory(content=document.content, sha256=document.sha256)

    async def _append(self, space: SpaceRef, memory: _Memory, key: str, facts: str) -> int:
        """Appends the section after the MEMORY.md the model read; after an edit (ABORTED)
        re-reads it and appends after the edit. Returns the bytes added (0 when the section
        is already there)."""
        version = self._prompt.version
        today = self._clock().date()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(WRITE_ATTEMPTS),
            retry=retry_if_exception_type(EtagMismatch),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    memory = await self._read_memory(space)
                    if already_dreamed(memory.content, key, version):
                        return 0
                section = dreamed_section(
                    memory.content, today=today, key=key, version=version, facts=facts
                )
                return await self._storage.write(
                    space,
                    MEMORY_PATH,
                    section,
                    append=True,
                    expected_sha256=memory.sha256,
                    create_only=not memory.sha256,
                )
        raise AssertionError("unreachable: tenacity re-raises the last EtagMismatch")

    async def _advance(
        self, space: SpaceRef, watermark: Watermark, marks: dict[str, LogMark]
    ) -> None:
        await self._watermarks.advance(space.id, watermark, marks, self._clock())
