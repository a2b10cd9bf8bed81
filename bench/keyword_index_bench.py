"""Keyword (BM25) indexes, tantivy and OpenSearch, on space-filtered search (issue 5).

100,000 chunks of synthetic English (a fixed vocabulary drawn with a Zipf law from a seeded
RNG, about 5 % of chunks carrying identifiers like ERR_4021 or deploy-2026-03-03), in
documents of 10 chunks spread over 100 spaces, loaded through each adapter's
`replace_chunks`. Measured, one client at a time:

* top-50 search of 1 space and of 4 spaces (2-4 query words, some identifiers), p50/p99;
* write -> visible: a 4-chunk `replace_chunks` of an existing path with a fresh marker word,
  then the search that must find it; p50/p99 of the replace and of replace + search;
* the same with 8 writers at once (tantivy commits them together).

    python bench/keyword_index_bench.py                       # both backends
    python bench/keyword_index_bench.py --backend tantivy --chunks 20000   # smaller

OpenSearch comes from ENGRAM_TEST_OPENSEARCH_URL, or is started from deploy/local for the
run and stopped after. Every loop has a fixed count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from benchlib import load_launcher, percentile

from engram.domain.chunks import Chunk, chunk_id
from engram.indexes.keyword.opensearch_index import OpenSearchKeywordIndex, WriteRefresh
from engram.indexes.keyword.tantivy_index import TantivyKeywordIndex
from engram.indexes.ports import KeywordIndex

ROOT = Path(__file__).resolve().parents[1]
TOP_K = 50
CHUNKS_PER_DOC = 10
WORDS_PER_CHUNK = (55, 85)

COMMON = """the of and to in a is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when
what if will so no more out up said about some can its into them only time than other new
could these two may first then do any like my now over such our man me even most made after
also did many before must through back years where much your way well down should because
each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great
old year off come since against go came right used take three memory agent service deploy
server error request build release test data index search query document space note daily
log team project user model vector chunk token review meeting plan design issue fix update
config cluster node shard replica backup restore schedule report metric alert incident
""".split()

SYLLABLES = "ka to ri mo sa lu ne vi po da ge xi bo fu ha je ly ru te wo".split()


def vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Corpus:
    def __init__(self, chunks: int, spaces: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        # Zipf weights over the vocabulary, common words first.
        self.weights = [1.0 / (rank + 1) for rank in range(len(self.words))]
        self.spaces = [f"v1:project:t{i % 7}:p{i}:::bench" for i in range(spaces)]
        self.identifiers = [f"ERR_{self.rng.randint(1000, 9999)}" for _ in range(300)] + [
            f"deploy-2026-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"
            for _ in range(300)
        ]
        self.docs: list[tuple[str, str, list[Chunk]]] = []
        made = 0
        n = 0
        while made < chunks:
            space = self.spaces[n % spaces]
            path = f"notes/{2024 + n % 3}/doc{n}.md" if n % 4 else f"daily/2026-{n:05d}.md"
            count = min(CHUNKS_PER_DOC, chunks - made)
            self.docs.append((space, path, self.chunks(space, path, f"d{n}", count, version=1)))
            made += count
            n += 1
        assert len({(space, path) for space, path, _ in self.docs}) == len(self.docs)

    def text(self, words: int) -> str:
        picked = self.rng.choices(self.words, weights=self.weights, k=words)
        if self.rng.random() < 0.05:
            picked.insert(self.rng.randrange(len(picked)), self.rng.choice(self.identifiers))
        sentences = []
        while picked:
            take = self.rng.randint(6, 16)
            sentence, picked = picked[:take], picked[take:]
            sentences.append(" ".join(sentence).capitalize() + ".")
        return " ".join(sentences)

    def chunks(
        self, space: str, path: str, doc: str, count: int, *, version: int, marker: str = ""
    ) -> list[Chunk]:
        return [
            Chunk(
                chunk_id=chunk_id(doc, i),
                document_id=doc,
                space_id=space,
                tenant="t",
                path=path,
                chunk_index=i,
                doc_version=version,
                content=(marker + " " if marker and i == 0 else "")
                + self.text(self.rng.randint(*WORDS_PER_CHUNK)),
            )
            for i in range(count)
        ]

    def query(self) -> str:
        if self.rng.random() < 0.1:
            return self.rng.choice(self.identifiers)
        # Query words from the middle of the distribution, like real questions.
        words = self.rng.choices(self.words[50:2000], k=self.rng.randint(2, 4))
        return " ".join(words)


def fmt(values: list[float]) -> str:
    return f"p50 {percentile(values, 50) * 1e3:7.2f} ms  p99 {percentile(values, 99) * 1e3:7.2f} ms"


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def load(index: KeywordIndex, corpus: Corpus, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(space: str, path: str, chunks: list[Chunk]) -> None:
        async with gate:
            await index.replace_chunks(space, path, chunks)

    start = time.perf_counter()
    await asyncio.gather(*(one(*doc) for doc in corpus.docs))
    return time.perf_counter() - start


async def measure(name: str, index: KeywordIndex, corpus: Corpus, args: argparse.Namespace) -> None:
    print(f"\n## {name}")
    seconds = await load(index, corpus, args.load_concurrency)
    print(
        f"load {len(corpus.docs)} replaces / {args.chunks} chunks: {seconds:.1f} s "
        f"({args.chunks / seconds:,.0f} chunks/s, {args.load_concurrency} concurrent)"
    )

    rng = random.Random(args.seed + 1)
    for spaces in (1, 4):
        queries = [(rng.sample(corpus.spaces, spaces), corpus.query()) for _ in range(args.queries)]
        for space_ids, q in queries[: args.queries // 10]:  # warm-up
            await index.search(space_ids, q, limit=TOP_K)
        latencies, counts = [], []
        for space_ids, q in queries:
            start = time.perf_counter()
            hits = await index.search(space_ids, q, limit=TOP_K)
            latencies.append(time.perf_counter() - start)
            counts.append(len(hits))
            assert all(h.chunk.space_id in space_ids for h in hits)
        print(
            f"search top-{TOP_K}, {spaces} space(s), {len(queries)} queries: {fmt(latencies)}"
            f"  (mean hits {statistics.mean(counts):.1f})"
        )

    versions = iter(range(2, 1 << 30))
    for writers in (1, 8):
        replace_s: list[float] = []
        visible_s: list[float] = []
        rounds = args.writes // writers

        async def write_then_find(doc_no: int) -> tuple[float, float]:
            space, path, old = corpus.docs[doc_no]
            marker = f"zzmark{uuid.uuid4().hex[:10]}"
            chunks = corpus.chunks(
                space, path, old[0].document_id, 4, version=next(versions), marker=marker
            )
            start = time.perf_counter()
            await index.replace_chunks(space, path, chunks)
            replaced = time.perf_counter() - start
            hits = await index.search([space], marker, limit=5)
            found = time.perf_counter() - start
            assert [h.chunk.chunk_id for h in hits] == [chunks[0].chunk_id], (marker, hits)
            return replaced, found

        for _ in range(rounds):
            docs = rng.sample(range(len(corpus.docs)), writers)
            results = await asyncio.gather(*(write_then_find(d) for d in docs))
            replace_s += [r for r, _ in results]
            visible_s += [v for _, v in results]
        print(f"4-chunk replace, {writers} writer(s), {len(replace_s)} writes: {fmt(replace_s)}")
        print(f"  write -> found by search:                  {fmt(visible_s)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["tantivy", "opensearch", "both"], default="both")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--load-concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument(
        "--opensearch-refresh",
        choices=["true", "wait_for", "both"],
        default="both",
        help="write refresh mode(s) to run OpenSearch with (wait_for uses a 200ms interval)",
    )
    args = parser.parse_args()

    corpus = Corpus(args.chunks, args.spaces, args.seed)
    print(
        f"corpus: {args.chunks} chunks, {len(corpus.docs)} documents, {args.spaces} spaces, "
        f"{sum(len(c.content) for _, _, cs in corpus.docs for c in cs) / args.chunks:.0f} "
        "chars/chunk"
    )

    async with AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kwbench-")))
        if args.backend in ("tantivy", "both"):
            index = TantivyKeywordIndex(workdir / "tantivy")
            await index.open()
            try:
                await measure("tantivy (embedded)", index, corpus, args)
            finally:
                await index.close()

        if args.backend in ("opensearch", "both"):
            url = os.environ.get("ENGRAM_TEST_OPENSEARCH_URL")
            if not url:
                backends = load_launcher()
                backends.provision(["opensearch"])
                running = backends.start_opensearch(workdir / "opensearch")
                stack.callback(running.stop)
                url = running.url
            modes: list[WriteRefresh] = (
                ["true", "wait_for"]
                if args.opensearch_refresh == "both"
                else [args.opensearch_refresh]
            )
            for mode in modes:
                alias = f"engram-bench-{uuid.uuid4().hex[:8]}"
                interval = "200ms" if mode == "wait_for" else "1s"
                os_index = OpenSearchKeywordIndex(
                    url,
                    alias=alias,
                    replicas=0,
                    refresh_interval=interval,
                    write_refresh=mode,
                    timeout_seconds=60.0,
                )
                await os_index.open()
                try:
                    await measure(
                        f"OpenSearch 2.19.6 (refresh={mode}, refresh_interval={interval})",
                        os_index,
                        corpus,
                        args,
                    )
                finally:
                    await _drop(url, alias)
                    await os_index.close()


async def _drop(url: str, alias: str) -> None:
    from opensearchpy import AsyncOpenSearch

    client = AsyncOpenSearch(hosts=[url])
    try:
        await client.indices.delete(index=f"{alias}-*", ignore_unavailable=True)
        await client.indices.delete_index_template(name=f"{alias}-template", ignore=[404])
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
