"""Dreaming (issue 15 item 2) on `engram dev`'s services: the dream job runs on the embedded
StorageService and database as the maintenance worker's service principal, against a test
double for a hosted chat model (a real OpenAI-compatible HTTP server on loopback). What a
user sees is read back over gRPC: MEMORY.md's content and who wrote it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engram.app.embedded import EmbeddedEngram, embedded_engram
from engram.client import AsyncClient, Document, NotFound, Space
from engram.domain.dreaming import LogMark, ModelUnavailable, UnusableAnswer, Watermark
from engram.domain.errors import Misconfigured, PermissionDenied, SecretInContent, Unavailable
from engram.domain.maintenance import JobReport, SpaceSettings
from engram.domain.principals import LOCAL_ADMIN, Principal, Role
from engram.domain.spaces import SpaceRef, Visibility
from engram.maintenance.chat import ChatConfig, OpenAICompatibleChat
from engram.maintenance.dream_watermarks import SCHEMA, SqliteWatermarkStore
from engram.maintenance.dreaming import DreamConfig, DreamJob
from engram.maintenance.local_storage import LocalStorage
from engram.storage.service import WriteMode
from tests.support.openai_test_double import (
    ChatReply,
    HttpFailure,
    OpenAICompatibleTestDouble,
    Stall,
)
from tests.support.settings import server_settings

pytestmark = pytest.mark.e2e

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
# The maintenance worker's identity (engram.domain.principals.MAINTENANCE once it lands).
MAINTENANCE = Principal(subject="engram-maintenance", tenant="", role=Role.ADMIN, service=True)
SPACE = SpaceRef.create(Visibility.PROJECT, tenant="local", name="agent", project="p")
SPACE_CLIENT = Space("project", "agent", project="p", tenant="local")
DAY1 = "daily/2026-12-01.md"
DAY1_CLI = "daily/2026-12-01-cli.md"
DAY2 = "daily/2026-12-02.md"
MEMORY = "# Memory\n\n- Ann prefers tea.\n"
API_KEY = "test-double-key"
ENABLED = SpaceSettings(dream_enabled=True)


@dataclass
class Dreaming:
    engram: EmbeddedEngram
    model: OpenAICompatibleTestDouble
    watermarks: SqliteWatermarkStore
    client: AsyncClient
    chats: list[OpenAICompatibleChat]

    def job(self, *, watermarks: Any = None, **config: Any) -> DreamJob:
        chat = ChatConfig(
            base_url=self.model.base_url,
            model="test-model",
            api_key=API_KEY,
            timeout_seconds=config.pop("timeout_seconds", 10.0),
            max_retries=config.pop("max_retries", 0),
        )
        client = OpenAICompatibleChat(chat)
        self.chats.append(client)
        return DreamJob(
            LocalStorage(self.engram.storage, MAINTENANCE),
            MAINTENANCE,
            watermarks or self.watermarks,
            client,
            DreamConfig(**{"enabled": True, **config}),
            clock=lambda: NOW,
        )

    async def run(self, **config: Any) -> JobReport:
        return await self.job(**config).run(SPACE, ENABLED)

    async def append(self, path: str, text: str) -> None:
        await self.engram.storage.write(LOCAL_ADMIN, SPACE, path, text, mode=WriteMode.APPEND)

    async def replace(self, path: str, text: str) -> None:
        await self.engram.storage.write(LOCAL_ADMIN, SPACE, path, text)

    async def document(self, path: str) -> Document | None:
        try:
            return await self.client.read_document(path)
        except NotFound:
            return None

    async def memory(self) -> str | None:
        found = await self.document("MEMORY.md")
        return None if found is None else found.content

    async def watermark(self) -> Watermark:
        return await self.watermarks.load(SPACE.id)


@pytest.fixture
async def dreaming(tmp_path: Path) -> AsyncIterator[Dreaming]:
    with OpenAICompatibleTestDouble(api_key=API_KEY) as model:
        async with embedded_engram(server_settings(tmp_path / "engram")) as engram:
            # The composition root adds SCHEMA to the embedded database's tables.
            await engram.database.open([SCHEMA])
            async with AsyncClient(f"127.0.0.1:{engram.port}", space=SPACE_CLIENT) as client:
                running = Dreaming(engram, model, SqliteWatermarkStore(engram.database), client, [])
                yield running
                for chat in running.chats:
                    await chat.close()


async def write_logs(d: Dreaming) -> None:
    await d.append(DAY1, "# Daily Log - 2026-12-01\n\n[09:12:00] We chose Postgres for billing.\n")
    await d.append(DAY1_CLI, "# Daily Log - 2026-12-01\n\n[17:40:00] Deploys on Fridays: banned.\n")


def sections(memory: str) -> list[str]:
    return re.findall(r"^## Dreamed \d{4}-\d{2}-\d{2}$", memory, flags=re.MULTILINE)


async def test_new_logs_are_dreamed_into_one_section_once(dreaming: Dreaming) -> None:
    d = dreaming
    await d.replace("MEMORY.md", MEMORY)
    await write_logs(d)
    d.model.script(ChatReply("- Billing runs on Postgres.\n- No deploys on Fridays."))

    report = await d.run()

    memory = await d.memory()
    assert memory is not None and memory.startswith(MEMORY), "appended, never rewritten"
    added = memory[len(MEMORY) :]
    assert re.fullmatch(
        r"\n## Dreamed 2026-12-02\n<!-- engram-dream dream-v1 [0-9a-f]{24} -->\n\n"
        r"- Billing runs on Postgres\.\n- No deploys on Fridays\.\n",
        added,
    ), added
    found = await d.document("MEMORY.md")
    assert found is not None and found.updated_by == "engram-maintenance"
    assert report.counts["sections_written"] == 1 and report.counts["logs_sent"] == 2
    assert report.counts["bytes_appended"] == len(added.encode())
    (request,) = d.model.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "test-model" and request.body["max_tokens"] == 1024
    assert "- Ann prefers tea." in request.user_message, "MEMORY.md is sent as it is"
    assert "We chose Postgres" in request.user_message
    assert "Deploys on Fridays" in request.user_message

    again = await d.run()

    assert len(d.model.requests) == 1, "nothing new: the model is not called"
    assert await d.memory() == memory
    assert again.counts["sections_written"] == 0 and again.message == "no new daily log content"


async def test_nothing_to_promote_advances_the_watermark_without_writing(
    dreaming: Dreaming,
) -> None:
    d = dreaming
    await write_logs(d)
    d.model.script(ChatReply("NOTHING_TO_PROMOTE"))

    report = await d.run()

    assert await d.memory() is None, "no MEMORY.md was created"
    assert report.counts["sections_written"] == 0 and "nothing to promote" in report.message
    watermark = await d.watermark()
    assert set(watermark.logs) == {DAY1, DAY1_CLI}
    await d.run()
    assert len(d.model.requests) == 1, "the same logs are not sent again"


async def test_a_failed_model_call_leaves_the_watermark_and_the_logs_are_sent_again(
    dreaming: Dreaming,
) -> None:
    d = dreaming
    await d.replace("MEMORY.md", MEMORY)
    await write_logs(d)
    d.model.script(HttpFailure(500), HttpFailure(503))

    with pytest.raises(ModelUnavailable, match="answered HTTP 503"):
        await d.run(max_retries=1)
    assert len(d.model.requests) == 2, "the SDK retried the 500 once"

    d.model.script(Stall(seconds=10))
    with pytest.raises(ModelUnavailable, match="did not answer within 0.5 s"):
        await d.run(timeout_seconds=0.5)

    d.model.script(ChatReply("- Billing runs on Postg", finish_reason="length"))
    with pytest.raises(UnusableAnswer, match="cut at the token limit"):
        await d.run()

    assert await d.watermark() == Watermark(), "no failure moved the watermark"
    assert await d.memory() == MEMORY
    d.model.script(ChatReply("- Billing runs on Postgres."))
    report = await d.run()
    assert report.counts["sections_written"] == 1
    assert d.model.requests[-1].user_message == d.model.requests[0].user_message, (
        "exactly the same input is sent again: nothing skipped"
    )


async def test_an_operator_edit_during_the_model_call_is_preserved(dreaming: Dreaming) -> None:
    d = dreaming
    await d.replace("MEMORY.md", MEMORY)
    await write_logs(d)
    gate = d.model.hold()
    d.model.script(ChatReply("- Billing runs on Postgres."))
    run = asyncio.create_task(d.run())
    await gate.wait_entered()
    edited = "# Memory\n\n- Ann prefers coffee now.\n- Bob owns billing.\n"
    await d.replace("MEMORY.md", edited)
    gate.release()

    report = await run

    memory = await d.memory()
    assert memory is not None and memory.startswith(edited), "the operator's edit is kept"
    assert "tea" not in memory, "the pre-edit MEMORY.md was not written back"
    assert memory.endswith("- Billing runs on Postgres.\n") and len(sections(memory)) == 1
    assert report.counts["sections_written"] == 1


async def test_a_secret_shaped_answer_is_refused_and_nothing_moves(dreaming: Dreaming) -> None:
    d = dreaming
    await d.replace("MEMORY.md", MEMORY)
    await write_logs(d)
    key = "AKIA" + "Q" * 16
    d.model.script(ChatReply(f"- The deploy user's key is {key}."))

    with pytest.raises(SecretInContent, match="an AWS access key id") as refused:
        await d.run()

    assert key not in str(refused.value), "the refusal never echoes the secret"
    assert await d.memory() == MEMORY
    assert await d.watermark() == Watermark(), "the logs will be read again"


async def test_only_the_new_tails_of_the_logs_are_sent(dreaming: Dreaming) -> None:
    d = dreaming
    await d.append(DAY1, "# Daily Log - 2026-12-01\n\n[09:00:00] entry-alpha\n")
    await d.run()
    await d.append(DAY1, "[10:00:00] entry-beta\n")
    await d.append(DAY2, "# Daily Log - 2026-12-02\n\n[08:00:00] entry-gamma\n")

    report = await d.run()

    sent = d.model.requests[-1].user_message
    assert "entry-beta" in sent and "entry-gamma" in sent
    assert "entry-alpha" not in sent, "what was sent before is not sent again"
    assert report.counts["logs_sent"] == 2
    await d.replace(DAY1, "# Daily Log - 2026-12-01\n\n[09:00:00] entry-alpha (corrected)\n")
    await d.run()
    assert "rewritten since it was last read" in d.model.requests[-1].user_message
    assert "entry-alpha (corrected)" in d.model.requests[-1].user_message


async def test_logs_over_the_input_budget_are_sent_over_several_runs_without_gaps(
    dreaming: Dreaming,
) -> None:
    d = dreaming
    lines = [f"[09:{minute:02d}:00] entry number {minute} of the day\n" for minute in range(30)]
    log = "# Daily Log - 2026-12-01\n\n" + "".join(lines)
    await d.append(DAY1, log)
    day2 = "# Daily Log - 2026-12-02\n\n[08:00:00] entry-gamma\n"
    await d.append(DAY2, day2)
    logs = {DAY1: log, DAY2: day2}
    covered: dict[str, list[tuple[int, int]]] = {}
    for _ in range(20):
        report = await d.run(max_input_chars=300)
        if report.counts["logs_sent"] == 0:
            break
        assert report.counts["chars_sent"] <= 300
        for detail in report.details:
            parsed = re.fullmatch(r"(\S+) \[(\d+), (\d+)\)", detail)
            assert parsed is not None, detail
            path, start, end = parsed[1], int(parsed[2]), int(parsed[3])
            assert logs[path][end - 1] == "\n", "an excerpt ends at a line end"
            covered.setdefault(path, []).append((start, end))
    assert len(d.model.requests) > 2, "the budget split the input"
    assert _contiguous(covered) == {path: len(text) for path, text in logs.items()}


def _contiguous(covered: Mapping[str, list[tuple[int, int]]]) -> dict[str, int]:
    ends = {}
    for path, ranges in covered.items():
        position = 0
        for start, end in ranges:
            assert start == position, f"{path}: gap or repeat at {position} ({ranges})"
            position = end
        ends[path] = position
    return ends


class WatermarkDownOnce(SqliteWatermarkStore):
    """The real store, made unavailable for one advance: the process died (or the store
    dropped) between the MEMORY.md write and the watermark."""

    failed = False

    async def advance(
        self, space_id: str, read: Watermark, logs: Mapping[str, LogMark], at: datetime
    ) -> Watermark:
        if not self.failed:
            self.failed = True
            raise Unavailable("the embedded database is closed (the server is shutting down)")
        return await super().advance(space_id, read, logs, at)


async def test_a_run_cut_between_write_and_watermark_is_finished_without_a_second_section(
    dreaming: Dreaming,
) -> None:
    d = dreaming
    await d.replace("MEMORY.md", MEMORY)
    await write_logs(d)
    d.model.script(ChatReply("- Billing runs on Postgres."))
    flaky = WatermarkDownOnce(d.engram.database)
    with pytest.raises(Unavailable):
        await d.run(watermarks=flaky)
    written = await d.memory()
    assert written is not None and len(sections(written)) == 1

    report = await d.job(watermarks=flaky).run(SPACE, ENABLED)

    assert len(d.model.requests) == 1, "the model is not asked again"
    assert await d.memory() == written, "no second section"
    assert "already holds" in report.message
    assert set((await d.watermark()).logs) == {DAY1, DAY1_CLI}


async def test_the_schedule_needs_the_worker_switch_and_the_space_opt_in(
    dreaming: Dreaming,
) -> None:
    d = dreaming
    on = d.job(interval=timedelta(hours=6))
    off = d.job(enabled=False)
    assert on.scheduled(ENABLED) and not on.scheduled(SpaceSettings())
    assert not off.scheduled(ENABLED)
    assert on.interval(ENABLED) == timedelta(hours=6) and on.name == "dream"
    no_model = DreamJob(
        LocalStorage(d.engram.storage, MAINTENANCE),
        MAINTENANCE,
        d.watermarks,
        None,
        DreamConfig(),
        clock=lambda: NOW,
    )
    with pytest.raises(Misconfigured, match="ENGRAM_LLM_BASE_URL"):
        await no_model.run(SPACE, ENABLED)
    shared = SpaceRef.create(Visibility.GLOBAL, tenant="", name="handbook")
    await d.engram.storage.write(LOCAL_ADMIN, shared, DAY1, "# Daily Log\n\n[09:00:00] x\n")
    with pytest.raises(PermissionDenied, match="platform admin"):
        await on.run(shared, ENABLED)
    assert d.model.requests == [], "refused before the model is called"
