"""LocalOnnxEmbedder: the bundled all-MiniLM-L6-v2 int8 model, run for real."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

import engram
from engram.app.config import Components
from engram.domain.chunks import ModelInfo
from engram.indexer.embedders import configured_embedder
from engram.indexer.embedders.local import (
    DIMENSION,
    MODEL_ID,
    LocalOnnxEmbedder,
    default_tokenizer_path,
)
from engram.runtime.settings import Settings


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalOnnxEmbedder]:
    # Module-scoped: the model loads once for these tests. Its worker thread is not tied
    # to an event loop, so each test's loop can use it.
    local = LocalOnnxEmbedder(batch_size=4)
    yield local
    local.close()


TEXTS = [
    "The cat sits on the mat",
    "Deploy the indexer with two replicas and a durable JetStream consumer.",
    "x",
    "Quarterly revenue grew 4% on strong subscription sales in the enterprise segment, "
    "while hardware margins narrowed for the third quarter in a row.",
    "",
    "A cat is sitting on a mat",
    "memory " * 400,
]


async def test_vectors_have_the_model_shape_and_unit_norm(embedder: LocalOnnxEmbedder) -> None:
    assert embedder.model == ModelInfo(MODEL_ID, DIMENSION)
    vectors = await embedder.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), DIMENSION)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = await embedder.embed_query("where does the cat sit?")
    assert query.shape == (DIMENSION,)
    assert query.dtype == np.float32


async def test_similar_sentences_are_close_and_unrelated_ones_are_not(
    embedder: LocalOnnxEmbedder,
) -> None:
    cat, cat2, revenue = await embedder.embed_documents(
        ["The cat sits on the mat", "A cat is sitting on a mat", "Quarterly revenue grew 4%"]
    )
    assert float(cat @ cat2) > 0.7
    assert float(cat @ revenue) < 0.2
    assert float(cat2 @ revenue) < 0.2
    query = await embedder.embed_query("feline resting on a rug")
    assert float(query @ cat) > float(query @ revenue) + 0.2


async def test_batching_and_bucketing_keep_the_input_order(embedder: LocalOnnxEmbedder) -> None:
    # batch_size=4 over 7 texts of very different lengths: two padded batches, reordered
    # by length inside; each row must still be the embedding of its own text.
    together = await embedder.embed_documents(TEXTS)
    alone = np.stack([await embedder.embed_query(text) for text in TEXTS])
    assert np.allclose(together, alone, atol=1e-4)


async def test_embedding_is_deterministic(embedder: LocalOnnxEmbedder) -> None:
    first = await embedder.embed_documents(TEXTS)
    second = await embedder.embed_documents(TEXTS)
    assert np.array_equal(first, second)


async def test_empty_input_gives_an_empty_matrix(embedder: LocalOnnxEmbedder) -> None:
    vectors = await embedder.embed_documents([])
    assert vectors.shape == (0, DIMENSION)


async def test_long_texts_are_truncated_at_max_length(embedder: LocalOnnxEmbedder) -> None:
    head = " ".join(["word"] * 40)
    texts = [head, head + " and then something else entirely"]
    short = LocalOnnxEmbedder(max_length=16)
    try:
        a, b = await short.embed_documents(texts)
        # Both truncate to the same first 16 tokens ([CLS] + 14 + [SEP]).
        assert np.allclose(a, b, atol=1e-5)
    finally:
        short.close()
    full_a, full_b = await embedder.embed_documents(texts)
    assert not np.allclose(full_a, full_b, atol=1e-3)


async def test_inference_runs_off_the_event_loop(embedder: LocalOnnxEmbedder) -> None:
    loop_thread = threading.get_ident()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await embedder.embed_documents(["a fairly ordinary sentence about memory"] * 64)
    elapsed = time.perf_counter() - started
    ticker.cancel()
    assert threading.get_ident() == loop_thread
    # The loop kept turning while 64 texts were embedded.
    assert ticks >= max(2, int(elapsed / 0.005) // 4)


def test_the_tokenizer_ships_inside_engram_with_its_licence() -> None:
    # Package data, not another wheel: `pip install engram` alone can embed.
    path = default_tokenizer_path()
    assert path.is_relative_to(Path(engram.__file__).parent)
    assert (path.parent / "LICENSE").read_text().count("Apache License") >= 1
    assert "all-MiniLM-L6-v2" in (path.parent / "NOTICE").read_text()
    # The uncased WordPiece vocabulary of the model: lower-cases, splits unknown words.
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    encoding = tokenizer.encode("Hello, Engram!")
    assert encoding.tokens == ["[CLS]", "hello", ",", "eng", "##ram", "!", "[SEP]"]
    assert encoding.ids == [101, 7592, 1010, 25540, 6444, 999, 102]


def test_invalid_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        LocalOnnxEmbedder(max_length=1024)
    with pytest.raises(ValueError):
        LocalOnnxEmbedder(batch_size=0)


def test_configured_embedder_defaults_to_the_local_model() -> None:
    built = _build(Settings(embed_max_length=128, embed_threads=1))
    assert isinstance(built, LocalOnnxEmbedder)
    assert built.model == ModelInfo(MODEL_ID, DIMENSION)
    built.close()


def _build(settings: Settings) -> object:
    return configured_embedder(Components.from_settings(settings).embedder)
