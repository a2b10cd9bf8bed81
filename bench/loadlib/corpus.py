"""The synthetic population and corpus, deterministic from a seed.

A population is `tenants` × `agents_per_tenant` agents. Each agent is a principal of its
tenant (role member) with its own workspace: the private space `ws-<agent>` of the tenant.
The corpus is markdown documents in those spaces (notes under `corpus/`, a MEMORY.md, past
daily logs), written from a vocabulary of pseudo-words with a Zipf-like frequency so BM25
has common and rare terms, until the documents hold `chunks` chunks as engram's chunker
cuts them (`engram.domain.chunking.build_chunks`, counted here).

Pre-loading imports each space's documents as one gzipped tar (`ImportSpace`, the fastest
write path: one call per space, through engram.client), then waits until the indexer's
backlog is empty.

Fast pre-load (`prefill_embeddings`, on by default in bench/load.py): before the import, the
indexer's embedding cache (keyed by model id and the sha256 of each chunk's indexed text)
receives a deterministic pseudo-random unit vector for every chunk of the corpus, so the
indexer runs its whole pipeline (read, chunk, cache lookup, keyword and vector index
writes) but never calls the model for the corpus. The corpus's vectors are then
meaningless as semantics; what a search costs (one query embedding by the real model, the
same index sizes) is unchanged. Writes made during the load are embedded by the model.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import json
import random
import tarfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from engram.client import AsyncClient, EngramError, Space, status_name
from engram.domain.chunking import build_chunks

SYLLABLES = (
    "ka lo mi ne ra to su vi de ba po gu le ti mo sa fe ri no zu an el or us ip ek ol am in ut"
).split()


# Bumped when what a cached pre-load holds changes, so older caches are not reused.
PRELOAD_FORMAT = 3
# An import sends the archive in pieces of this size.
IMPORT_PIECE = 1 << 20


@dataclass(frozen=True)
class CorpusSpec:
    chunks: int = 100_000
    tenants: int = 20
    agents_per_tenant: int = 10
    seed: int = 16

    def key(self) -> str:
        """Names the cached pre-load: the corpus, and the pre-load's format (2: cached after
        the maintenance worker's first sweep; 3: on PostgreSQL, each service in a database
        of its own)."""
        keyed = {**asdict(self), "preload_format": PRELOAD_FORMAT}
        return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Agent:
    tenant: str
    sub: str

    @property
    def space_name(self) -> str:
        return f"ws-{self.sub}"

    def space(self) -> Space:
        return Space(visibility="private", tenant=self.tenant, name=self.space_name)


def agents(spec: CorpusSpec) -> list[Agent]:
    return [
        Agent(f"t{t:03d}", f"a{t:03d}x{a:03d}")
        for t in range(spec.tenants)
        for a in range(spec.agents_per_tenant)
    ]


def vocabulary(seed: int, size: int = 3000) -> list[str]:
    rng = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


class Words:
    """Pseudo-words drawn with a Zipf-like (1/rank) frequency."""

    def __init__(self, seed: int) -> None:
        self.words = vocabulary(seed)
        self.weights = [1.0 / (rank + 1) for rank in range(len(self.words))]

    def sample(self, rng: random.Random, n: int) -> list[str]:
        return rng.choices(self.words, weights=self.weights, k=n)

    def sentence(self, rng: random.Random, low: int = 6, high: int = 18) -> str:
        text = " ".join(self.sample(rng, rng.randint(low, high)))
        return text[0].upper() + text[1:] + "."

    def query(self, rng: random.Random) -> str:
        # Queries lean to the middle of the vocabulary: neither stop-word-like nor unseen.
        return " ".join(rng.choice(self.words[20:800]) for _ in range(rng.randint(2, 4)))


def document(words: Words, rng: random.Random) -> str:
    """A markdown note: a heading, then 2 to 24 paragraphs of a few sentences (about 1 to
    14 chunks, 7 on average: the indexer's cost is largely per document, so fewer, longer
    notes make the pre-load faster for the same number of chunks)."""
    parts = [f"# {' '.join(words.sample(rng, 3)).title()}\n"]
    for _ in range(rng.randint(2, 24)):
        if rng.random() < 0.25:
            parts.append(f"## {' '.join(words.sample(rng, 2)).title()}\n")
        parts.append(" ".join(words.sentence(rng) for _ in range(rng.randint(1, 4))) + "\n")
    return "\n".join(parts)


def count_chunks(content: str) -> int:
    return len(
        build_chunks(
            space_id="s", tenant="t", path="p.md", document_id="d", version=1, content=content
        )
    )


@functools.lru_cache(maxsize=2)
def corpus(spec: CorpusSpec) -> dict[Agent, dict[str, str]]:
    """Every agent's documents (path -> content), `spec.chunks` chunks in all (the last
    document may overshoot by a few)."""
    rng = random.Random(spec.seed)
    words = Words(spec.seed)
    population = agents(spec)
    docs: dict[Agent, dict[str, str]] = {a: {} for a in population}
    total = 0
    n = 0
    while total < spec.chunks:
        agent = population[n % len(population)]
        mine = docs[agent]
        kind = rng.random()
        if "MEMORY.md" not in mine:
            path = "MEMORY.md"
        elif kind < 0.2:
            path = f"daily/2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}.md"
        else:
            path = f"corpus/{words.sample(rng, 1)[0]}/{n:06d}.md"
        content = document(words, rng)
        if path in mine:
            content = mine[path] + "\n" + content
            total -= count_chunks(mine[path])
        mine[path] = content
        total += count_chunks(content)
        n += 1
    return docs


def chunk_texts(spec: CorpusSpec) -> list[str]:
    """The indexed text (heading trail, then the text) of every chunk of the corpus."""
    texts: list[str] = []
    for files in corpus(spec).values():
        for path, content in files.items():
            chunks = build_chunks(
                space_id="s", tenant="t", path=path, document_id="d", version=1, content=content
            )
            texts.extend(chunk.indexed_text for chunk in chunks)
    return texts


def synthetic_vector(sha: str, dimension: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    vector = np.random.default_rng(int(sha[:16], 16)).standard_normal(dimension)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


async def prefill_embeddings(
    target: str, spec: CorpusSpec, where: dict[str, str]
) -> dict[str, Any]:
    """Puts a synthetic vector for every corpus chunk into the embedding cache the indexer
    reads: the SQLite database of `engram dev` (`where["data_dir"]`), or MongoDB
    (`where["mongo_uri"]`, `where["mongo_db"]`)."""
    import contextlib
    from pathlib import Path

    from engram.indexer.embedders.local import DIMENSION, MODEL_ID
    from engram.indexer.embedding_cache import (
        MongoIdEmbeddingCache,
        SqliteEmbeddingCache,
        text_sha256,
    )

    started = time.monotonic()
    texts = await asyncio.to_thread(chunk_texts, spec)
    hashes = list(dict.fromkeys(text_sha256(t) for t in texts))
    vectors = {sha: synthetic_vector(sha, DIMENSION) for sha in hashes}
    async with contextlib.AsyncExitStack() as stack:
        cache: Any
        if target == "dev":
            from engram.app.adapters import open_sqlite
            from engram.runtime.settings import Settings

            settings = Settings(data_dir=Path(where["data_dir"]))
            cache = SqliteEmbeddingCache(await open_sqlite(settings, stack))
        else:
            from engram.backends.mongo import connect

            client, database = connect(where["mongo_uri"], where["mongo_db"])
            stack.push_async_callback(client.close)
            cache = MongoIdEmbeddingCache(database)
            await cache.ensure_indexes()
        items = list(vectors.items())
        for at in range(0, len(items), 2000):
            await cache.put_many(MODEL_ID, dict(items[at : at + 2000]))
    return {
        "prefilled_vectors": len(vectors),
        "prefill_seconds": round(time.monotonic() - started, 1),
    }


def archive(files: dict[str, str]) -> bytes:
    """A gzipped tar of `files`, as ExportSpace writes and ImportSpace reads."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path, content in sorted(files.items()):
            data = content.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 1_764_547_200
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _transient(error: BaseException) -> bool:
    return isinstance(error, EngramError) and status_name(error) in (
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
    )


def mint_tokens(population: list[Agent], secret: str, ttl: float = 7 * 86400) -> dict[str, str]:
    from tests.support.tokens import mint

    return {a.sub: mint(a.sub, a.tenant, "member", secret=secret, ttl=ttl) for a in population}


async def preload(
    channel_for: Any,
    spec: CorpusSpec,
    tokens: dict[str, str],
    *,
    concurrency: int = 2,
    time_cap: float = 3600.0,
) -> dict[str, Any]:
    """Imports every space's documents (one ImportSpace per space, `concurrency` at once).
    `channel_for(service)` gives a grpc.aio channel. Returns counts and the elapsed time."""
    started = time.monotonic()
    docs = await asyncio.to_thread(corpus, spec)
    built = time.monotonic() - started
    # The client never repeats an import by itself (its source may not be read twice);
    # the loop below does, since OVERWRITE makes these imports idempotent.
    storage = AsyncClient(channel=channel_for("storage"), retries=0, stream_timeout=300)
    queue = list(docs.items())
    written = 0
    size = 0
    deadline = time.monotonic() + time_cap

    async def worker() -> None:
        nonlocal written, size
        while queue and time.monotonic() < deadline:
            agent, files = queue.pop()
            data = archive(files)
            size += len(data)

            pieces = [data[at : at + IMPORT_PIECE] for at in range(0, len(data), IMPORT_PIECE)]
            importer = storage.as_caller(tokens[agent.sub], space=agent.space())
            # OVERWRITE makes an import idempotent: one that failed (a backend too slow for
            # a deadline under the pre-load's burst) is sent again.
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_transient),
                stop=stop_after_attempt(6),
                wait=wait_exponential(multiplier=1, max=20),
                reraise=True,
            ):
                with attempt:
                    answer = await importer.import_space(pieces, strategy="overwrite")
            written += answer.written

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if queue:
        raise TimeoutError(f"pre-load: {len(queue)} spaces not imported within {time_cap:.0f}s")
    imported = time.monotonic() - started
    return {
        "documents": written,
        "chunks": spec.chunks,
        "archive_bytes": size,
        "build_seconds": round(built, 1),
        "import_seconds": round(imported - built, 1),
    }


async def wait_indexed(
    channel_for: Any, token: str, *, time_cap: float, quiet_polls: int = 3
) -> dict[str, Any]:
    """Until the indexer's backlog reads 0 `quiet_polls` times in a row (1 s apart), or
    `time_cap` seconds. Returns the wait and the backlog seen first."""
    # One attempt of at most 10 s per poll: a failed poll is printed and the next one
    # comes a second later.
    indexer = AsyncClient(channel=channel_for("indexer"), token=token, retries=0, timeout=10)
    started = time.monotonic()
    first: int | None = None
    zeros = 0
    last_print = 0.0
    while zeros < quiet_polls:
        if time.monotonic() - started > time_cap:
            raise TimeoutError(f"index backlog not empty after {time_cap:.0f}s")
        try:
            status = await indexer.index_status()
        except EngramError as error:
            print(f"  index status: {status_name(error)}", flush=True)
            await asyncio.sleep(1)
            continue
        backlog = int(status.backlog)
        first = backlog if first is None else first
        zeros = zeros + 1 if backlog == 0 else 0
        if time.monotonic() - last_print > 15:
            print(f"  index backlog {backlog}", flush=True)
            last_print = time.monotonic()
        await asyncio.sleep(1)
    return {"first_backlog": first, "index_wait_seconds": round(time.monotonic() - started, 1)}


def read_targets(spec: CorpusSpec, per_agent: int = 8) -> dict[str, list[str]]:
    """A few corpus paths per agent for the mix's reads."""
    docs = corpus(spec)
    rng = random.Random(spec.seed + 1)
    out: dict[str, list[str]] = {}
    for agent, files in docs.items():
        paths = sorted(files)
        out[agent.sub] = rng.sample(paths, min(per_agent, len(paths)))
    return out
