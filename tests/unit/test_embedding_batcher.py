"""EmbeddingBatcher: concurrent calls share model jobs; failures and cancellations stay with
their own callers. The model job here is a recording function whose release the test
controls, so which calls share a job is decided by the test, never by timing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest
from prometheus_client import REGISTRY

from engram.domain.errors import InvalidArgument
from engram.indexer.embedders.batching import EmbeddingBatcher
from engram.indexer.embedders.local import LocalOnnxEmbedder, _runs
from engram.indexes.ports import IndexUnavailable, Vectors

# Every test is bounded: a batcher that lost a call would otherwise hang the suite.
BOUND = 10.0


class Model:
    """A model job: row i of a text is [its length, job number]; each job waits for
    `release` when `hold` is set, so the test can queue calls behind a running job."""

    def __init__(self, *, hold: bool = False) -> None:
        self.jobs: list[list[str]] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        if not hold:
            self.release.set()
        self.fail_on: str | None = None
        self.error: Exception = RuntimeError("onnxruntime exploded")

    async def __call__(self, texts: list[str]) -> Vectors:
        self.jobs.append(list(texts))
        self.started.set()
        await self.release.wait()
        if self.fail_on is not None and self.fail_on in texts:
            raise self.error
        number = len(self.jobs)
        return np.array([[len(text), number] for text in texts], dtype=np.float32)


async def wait_for_job(model: Model) -> None:
    """Until the first job has started."""
    async with asyncio.timeout(BOUND):
        await model.started.wait()


async def settle() -> None:
    """Lets every ready task run (queued calls reach the batcher's queue)."""
    for _ in range(20):
        await asyncio.sleep(0)


def batcher(
    model: Model,
    *,
    window: float = 0.0,
    max_batch: int = 32,
    max_pending: int = 1024,
    parallel: int = 1,
) -> EmbeddingBatcher:
    return EmbeddingBatcher(
        model,
        window=window,
        max_batch=max_batch,
        max_pending=max_pending,
        name="test",
        parallel=parallel,
    )


async def test_calls_arriving_while_a_job_runs_share_the_next_job() -> None:
    model = Model(hold=True)
    embed = batcher(model).embed
    async with asyncio.timeout(BOUND):
        first = asyncio.create_task(embed(["a"]))
        await wait_for_job(model)
        others = [asyncio.create_task(embed(["b" * n, "c" * n])) for n in range(1, 6)]
        await settle()
        model.release.set()
        rows = await first
        results = await asyncio.gather(*others)
    assert model.jobs == [
        ["a"],
        ["b", "c", "bb", "cc", "bbb", "ccc", "bbbb", "cccc", "bbbbb", "ccccc"],
    ]
    assert rows.tolist() == [[1, 1]]
    # Each caller gets its own rows, in its own order, from the shared second job.
    for n, result in enumerate(results, start=1):
        assert result.tolist() == [[n, 2], [n, 2]]


async def test_a_window_gathers_calls_until_the_batch_is_full() -> None:
    # A window far longer than the test: the job starts because max_batch texts wait.
    model = Model()
    embed = batcher(model, window=3600.0, max_batch=4).embed
    async with asyncio.timeout(BOUND):
        results = await asyncio.gather(*(embed([f"q{n}"]) for n in range(4)))
    assert model.jobs == [["q0", "q1", "q2", "q3"]]
    assert [r.tolist() for r in results] == [[[2, 1]]] * 4


async def test_the_window_holds_a_call_only_while_calls_arrive_together() -> None:
    model = Model()
    embed = batcher(model, window=3600.0, max_batch=2).embed
    async with asyncio.timeout(BOUND):
        # Nothing shared a job yet: a lone call is answered at once, not after the window.
        assert (await embed(["lone"])).tolist() == [[4, 1]]
        await asyncio.gather(embed(["a"]), embed(["b"]))
        # The last job carried two calls: the next one waits for company (the window is an
        # hour; it goes when the batch is full).
        waiting = asyncio.create_task(embed(["c"]))
        await settle()
        assert len(model.jobs) == 2
        company = asyncio.create_task(embed(["dd"]))
        results = await asyncio.gather(waiting, company)
    assert model.jobs == [["lone"], ["a", "b"], ["c", "dd"]]
    assert [r.tolist() for r in results] == [[[1, 3]], [[2, 3]]]


async def test_jobs_hold_at_most_max_batch_texts_and_whole_calls_only() -> None:
    model = Model(hold=True)
    embed = batcher(model, max_batch=3).embed
    async with asyncio.timeout(BOUND):
        first = asyncio.create_task(embed(["x"]))
        await wait_for_job(model)
        sizes = (1, 1, 2, 4, 1)
        queued = [asyncio.create_task(embed(["y"] * size)) for size in sizes]
        await settle()
        model.release.set()
        await first
        results = await asyncio.gather(*queued)
    # [1, 1] fits, + 2 would not; [2]; the 4-text call goes alone; then [1].
    assert [len(job) for job in model.jobs] == [1, 2, 2, 4, 1]
    assert [len(r) for r in results] == list(sizes)


async def test_a_failing_job_fails_only_its_own_callers_with_a_clear_error() -> None:
    model = Model(hold=True)
    model.fail_on = "bad"
    embed = batcher(model, max_batch=2).embed
    async with asyncio.timeout(BOUND):
        first = asyncio.create_task(embed(["ok"]))
        await wait_for_job(model)
        doomed = [asyncio.create_task(embed(["bad"])), asyncio.create_task(embed(["fine"]))]
        spared = asyncio.create_task(embed(["later"]))
        await settle()
        model.release.set()
        assert (await first).tolist() == [[2, 1]]
        outcomes = await asyncio.gather(*doomed, return_exceptions=True)
        assert (await spared).tolist() == [[5, 3]]
    assert model.jobs == [["ok"], ["bad", "fine"], ["later"]]
    for outcome in outcomes:
        assert isinstance(outcome, IndexUnavailable)
        assert "RuntimeError: onnxruntime exploded" in outcome.message
        assert isinstance(outcome.__cause__, RuntimeError)


async def test_an_engram_error_reaches_the_callers_as_it_is() -> None:
    model = Model()
    model.fail_on = "bad"
    model.error = InvalidArgument("text too strange")
    embed = batcher(model).embed
    async with asyncio.timeout(BOUND):
        with pytest.raises(InvalidArgument, match="text too strange"):
            await embed(["bad"])
        # The batcher keeps serving after a failed job.
        assert (await embed(["good"])).tolist() == [[4, 2]]


async def test_a_caller_cancelled_while_queued_is_left_out_of_the_job() -> None:
    model = Model(hold=True)
    embed = batcher(model).embed
    async with asyncio.timeout(BOUND):
        first = asyncio.create_task(embed(["a"]))
        await wait_for_job(model)
        gone = asyncio.create_task(embed(["gone"]))
        kept = asyncio.create_task(embed(["kept"]))
        await settle()
        gone.cancel()
        await settle()
        model.release.set()
        await first
        assert (await kept).tolist() == [[4, 2]]
    assert gone.cancelled()
    assert model.jobs == [["a"], ["kept"]]


async def test_a_caller_cancelled_while_its_job_runs_does_not_disturb_the_others() -> None:
    model = Model(hold=True)
    embed = batcher(model, window=3600.0, max_batch=2).embed
    async with asyncio.timeout(BOUND):
        leaving = asyncio.create_task(embed(["one"]))
        staying = asyncio.create_task(embed(["two"]))
        await wait_for_job(model)
        leaving.cancel()
        await settle()
        model.release.set()
        assert (await staying).tolist() == [[3, 1]]
    assert leaving.cancelled()
    assert model.jobs == [["one", "two"]]


async def test_a_full_queue_refuses_at_once() -> None:
    model = Model(hold=True)
    embed = batcher(model, max_batch=2, max_pending=2).embed
    async with asyncio.timeout(BOUND):
        running = asyncio.create_task(embed(["r"]))
        await wait_for_job(model)
        queued = [asyncio.create_task(embed(["q"])) for _ in range(2)]
        await settle()
        with pytest.raises(IndexUnavailable, match="queue full"):
            await embed(["over"])
        model.release.set()
        await running
        assert [len(r) for r in await asyncio.gather(*queued)] == [1, 1]


async def test_closing_fails_what_is_still_queued() -> None:
    model = Model(hold=True)
    batch = batcher(model)
    async with asyncio.timeout(BOUND):
        running = asyncio.create_task(batch.embed(["r"]))
        await wait_for_job(model)
        queued = asyncio.create_task(batch.embed(["q"]))
        await settle()
        await batch.aclose()
        for task in (running, queued):
            with pytest.raises(IndexUnavailable, match="closed"):
                await task


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        batcher(Model(), window=-1.0)
    with pytest.raises(ValueError):
        batcher(Model(), max_batch=8, max_pending=4)
    with pytest.raises(ValueError):
        batcher(Model(), parallel=0)


# --- the local model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> Iterator[LocalOnnxEmbedder]:
    model = LocalOnnxEmbedder(threads=1, query_window=3600.0, query_max_batch=8)
    yield model
    model.close()


def jobs_of(name: str) -> tuple[float, float]:
    count = REGISTRY.get_sample_value("engram_embed_batch_texts_count", {"embedder": name})
    total = REGISTRY.get_sample_value("engram_embed_batch_texts_sum", {"embedder": name})
    return count or 0.0, total or 0.0


async def test_concurrent_queries_share_one_model_run_and_match_single_embeddings(
    local: LocalOnnxEmbedder,
) -> None:
    texts = [f"where did we deploy release {n}?" for n in range(7)] + ["a much longer query " * 5]
    alone = np.concatenate([await local.embed_documents([text]) for text in texts])
    count, total = jobs_of("query")
    async with asyncio.timeout(60):
        together = await asyncio.gather(*(local.embed_query(text) for text in texts))
    # Eight queries, a window of an hour: one job, started because the batch was full.
    assert jobs_of("query") == (count + 1, total + 8)
    assert np.allclose(np.stack(together), alone, atol=1e-4)


async def test_parallel_jobs_run_side_by_side() -> None:
    model = Model(hold=True)
    embed = batcher(model, parallel=2).embed
    async with asyncio.timeout(BOUND):
        first = asyncio.create_task(embed(["a"]))
        await wait_for_job(model)
        second = asyncio.create_task(embed(["bb"]))
        await settle()
        third = asyncio.create_task(embed(["ccc"]))
        await settle()
        # Two jobs started although neither finished; the third call waits for a slot.
        assert model.jobs == [["a"], ["bb"]]
        model.release.set()
        results = await asyncio.gather(first, second, third)
    assert model.jobs == [["a"], ["bb"], ["ccc"]]
    assert [r.tolist() for r in results] == [[[1, 2]], [[2, 2]], [[3, 3]]]


def test_model_runs_stay_within_the_token_budget() -> None:
    lengths = np.array([5, 10, 10, 20, 60, 100, 300], dtype=np.int64)
    runs = _runs(lengths, 32, 64)
    assert runs == [slice(0, 3), slice(3, 4), slice(4, 5), slice(5, 6), slice(6, 7)]
    # Rows cap the run too; a text longer than the budget runs alone.
    assert _runs(np.array([1] * 5, dtype=np.int64), 2, 512) == [
        slice(0, 2),
        slice(2, 4),
        slice(4, 5),
    ]
