"""TantivyKeywordIndex: the embedded BM25 chunk index of `engram dev`, on disk via tantivy.

Schema: `chunk_id`, `space_id`, `tenant`, `path`, `document_id` (raw keywords, stored),
`path_dirs` (raw, every scope of the path; see `scoping`), `chunk_index`, `doc_version`
(integers, stored, fast), `content` (stored, tokenizer `en_stem`: split on non-alphanumerics,
lowercase, English Snowball stemming) and `content_ids` (not stored, the identifiers of the
content kept whole, see `scoping.IDENTIFIER_PATTERN`).

A query is never parsed as tantivy query syntax: it goes through the same analyzers as the
fields, and each token becomes a term (SHOULD, BM25) over `content`, and each identifier a
term over `content_ids`. So `"unbalanced`, `C++`, `a:b` or `(` cannot raise, and
`ERR_4021` matches `err`, `4021` and the rarer whole `err_4021`. The space set and path
scope are MUST clauses scored 0 inside the same query, so filtering happens in the index.

Writes: tantivy allows one IndexWriter per index directory (across processes, too: a second
process fails at `open` with IndexUnavailable). It lives on one dedicated thread. Writes
queue up while a commit runs and the next commit takes all of them (group commit), and every
commit reloads the searcher before the writes it carries return, so they are visible then.
Searches run in a small thread pool (tantivy releases the GIL while searching).

A replace carrying an older `doc_version` of the same document than the one the index holds
for that path is ignored: a stale read by a slow indexer must not roll back a newer one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import tantivy

from engram.domain.chunks import Chunk, IndexedDocument, ScoredChunk, indexed_documents
from engram.domain.errors import InvalidArgument
from engram.domain.scoping import (
    IDENTIFIER_PATTERN,
    PATH_SCOPES_FIELD,
    bound_query,
    normalize_path_prefix,
    path_scopes,
)
from engram.indexes.ports import IndexUnavailable
from engram.runtime.priority import lower_thread_priority

T = TypeVar("T")

# Bump when the schema or an analyzer changes; an index with another version is refused.
SCHEMA_VERSION = 1
_MARKER = "engram-keyword-index.json"
_IDENT_TOKENIZER = "engram_ident"
# tantivy's `en_stem` drops tokens longer than this; the query side must match it.
_MAX_TOKEN_CHARS = 40
_STORED_TEXT = ("chunk_id", "space_id", "tenant", "path", "document_id")
# chunks_of fetches in pages of this many hits.
_PAGE = 1024


@dataclass(frozen=True, slots=True)
class _Write:
    space_id: str
    path: str
    chunks: tuple[Chunk, ...]
    # Removes every chunk of the space (path and chunks unused).
    whole_space: bool = False


class TantivyKeywordIndex:
    """A `KeywordIndex` on a tantivy index directory."""

    def __init__(
        self,
        directory: Path,
        *,
        writer_heap_bytes: int = 50_000_000,
        search_threads: int = 2,
        writer_nice: int = 0,
    ) -> None:
        self._directory = directory
        self._writer_nice = writer_nice
        self._writer_heap_bytes = writer_heap_bytes
        self._search_threads = search_threads
        self._index: Any = None
        self._schema: Any = None
        self._writer: Any = None
        self._writer_pool: ThreadPoolExecutor | None = None
        self._search_pool: ThreadPoolExecutor | None = None
        self._analyzers = threading.local()
        self._pending: list[tuple[_Write, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def directory(self) -> Path:
        return self._directory

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Opens the index directory, creating it (and the index) on first use."""
        if self._index is not None:
            return
        self._closing = False
        # The writer thread, and tantivy's indexing and merge threads it starts, are
        # background work: `writer_nice` lowers their CPU priority.
        writer_pool = ThreadPoolExecutor(
            1,
            thread_name_prefix="tantivy-writer",
            initializer=lower_thread_priority,
            initargs=(self._writer_nice,),
        )
        try:
            await asyncio.get_running_loop().run_in_executor(writer_pool, self._open_sync)
        except BaseException:
            writer_pool.shutdown(wait=False)
            raise
        self._writer_pool = writer_pool
        self._search_pool = ThreadPoolExecutor(
            self._search_threads, thread_name_prefix="tantivy-search"
        )

    async def close(self) -> None:
        """Finishes queued writes, waits for merges, and releases the writer lock."""
        if self._index is None or self._writer_pool is None:
            return
        self._closing = True
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        writer_pool, search_pool = self._writer_pool, self._search_pool
        try:
            await asyncio.get_running_loop().run_in_executor(writer_pool, self._close_sync)
        finally:
            self._index = self._schema = self._writer = None
            self._writer_pool = self._search_pool = None
            writer_pool.shutdown(wait=True)
            if search_pool is not None:
                search_pool.shutdown(wait=True)

    def _open_sync(self) -> None:
        directory = self._directory
        marker = directory / _MARKER
        with _mapped("open"):
            directory.mkdir(parents=True, exist_ok=True)
            schema = _schema()
            if tantivy.Index.exists(str(directory)):
                found = _marker_version(marker)
                if found != SCHEMA_VERSION:
                    raise IndexUnavailable(
                        f"the keyword index in {directory} has schema version {found}, this "
                        f"engram needs {SCHEMA_VERSION}: delete the directory and reindex",
                        metadata={"backend": "tantivy"},
                    )
                index = tantivy.Index.open(str(directory))
            else:
                index = tantivy.Index(schema, path=str(directory))
                marker.write_text(json.dumps({"schema_version": SCHEMA_VERSION}) + "\n")
            index.register_tokenizer(_IDENT_TOKENIZER, _ident_analyzer())
            index.config_reader(reload_policy="manual")
            try:
                writer = index.writer(heap_size=self._writer_heap_bytes, num_threads=1)
            except ValueError as exc:
                if "LockBusy" not in str(exc):
                    raise
                raise IndexUnavailable(
                    f"the keyword index in {directory} is held by another writer (another "
                    "engram process on the same data directory?)",
                    metadata={"backend": "tantivy"},
                ) from None
            index.reload()
        self._index, self._schema, self._writer = index, index.schema, writer

    def _close_sync(self) -> None:
        with _mapped("close"):
            self._writer.wait_merging_threads()

    # --- writes ------------------------------------------------------------------------------

    async def replace_chunks(self, space_id: str, path: str, chunks: Sequence[Chunk]) -> None:
        """Makes (space_id, path) hold exactly `chunks`, visible to search on return."""
        for chunk in chunks:
            if chunk.space_id != space_id or chunk.path != path:
                raise InvalidArgument(
                    f"chunk {chunk.chunk_id} belongs to {chunk.space_id}:{chunk.path}, not "
                    f"{space_id}:{path}",
                    field="chunks",
                )
        await self._write(_Write(space_id, path, tuple(chunks)))

    async def delete_chunks(self, space_id: str, path: str) -> None:
        await self._write(_Write(space_id, path, ()))

    async def delete_space(self, space_id: str) -> None:
        await self._write(_Write(space_id, "", (), whole_space=True))

    async def _write(self, write: _Write) -> None:
        self._check_open()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((write, done))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        """Commits queued writes, one batch per commit, until the queue is empty."""
        loop = asyncio.get_running_loop()
        try:
            while self._pending and self._writer_pool is not None:
                batch, self._pending = self._pending, []
                error: IndexUnavailable | None = None
                finished = False
                try:
                    await loop.run_in_executor(
                        self._writer_pool, self._commit_sync, [w for w, _ in batch]
                    )
                    finished = True
                except IndexUnavailable as exc:
                    error = exc
                finally:
                    for _, done in batch:
                        if done.done():
                            continue
                        if finished:
                            done.set_result(None)
                        else:
                            done.set_exception(
                                IndexUnavailable(
                                    error.message if error else "keyword index write interrupted",
                                    metadata={"backend": "tantivy"},
                                )
                            )
        finally:
            self._flusher = None

    def _commit_sync(self, writes: list[_Write]) -> None:
        with _mapped("write"):
            try:
                self._apply_sync(writes)
                self._writer.commit()
            except BaseException:
                # Nothing of a failed batch may ride along with the next commit.
                self._writer.rollback()
                raise
            self._index.reload()

    def _apply_sync(self, writes: list[_Write]) -> None:
        schema, writer = self._schema, self._writer
        searcher = self._index.searcher()
        # (space_id, path) -> (document_id, doc_version) written earlier in this batch.
        written: dict[tuple[str, str], tuple[str, int] | None] = {}
        # Spaces erased earlier in this batch: the searcher still sees their old chunks, so a
        # later write there is never stale against them.
        erased: set[str] = set()
        for write in writes:
            if write.whole_space:
                writer.delete_documents_by_query(
                    tantivy.Query.term_query(schema, "space_id", write.space_id)
                )
                erased.add(write.space_id)
                written = {k: v for k, v in written.items() if k[0] != write.space_id}
                continue
            key = (write.space_id, write.path)
            if write.chunks:
                head = write.chunks[0]
                if (key in written or write.space_id not in erased) and self._is_stale(
                    searcher, written, key, head.document_id, head.doc_version
                ):
                    continue
                written[key] = (head.document_id, head.doc_version)
            else:
                written[key] = None
            writer.delete_documents_by_query(_path_query(schema, write.space_id, write.path))
            for chunk in write.chunks:
                writer.add_document(_document(chunk))

    def _is_stale(
        self,
        searcher: Any,
        written: dict[tuple[str, str], tuple[str, int] | None],
        key: tuple[str, str],
        document_id: str,
        doc_version: int,
    ) -> bool:
        if key in written:
            earlier = written[key]
            return earlier is not None and earlier[0] == document_id and earlier[1] > doc_version
        schema = self._schema
        newer = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, _path_query(schema, *key)),
                (tantivy.Occur.Must, tantivy.Query.term_query(schema, "document_id", document_id)),
                (
                    tantivy.Occur.Must,
                    tantivy.Query.range_query(
                        schema,
                        "doc_version",
                        tantivy.FieldType.Integer,
                        lower_bound=doc_version,
                        include_lower=False,
                    ),
                ),
            ]
        )
        return bool(searcher.search(newer, 1, count=False).hits)

    # --- reads -------------------------------------------------------------------------------

    async def search(
        self, space_ids: Sequence[str], query: str, *, limit: int, path_prefix: str = ""
    ) -> list[ScoredChunk]:
        """BM25 hits over `content` (and whole identifiers), best first, filtered in the index
        to `space_ids` and the directory scope `path_prefix`."""
        if limit <= 0 or not space_ids:
            return []
        return await self._read(self._search_sync, list(space_ids), query, limit, path_prefix)

    async def chunks_of(self, space_id: str, path: str) -> list[Chunk]:
        return await self._read(self._chunks_of_sync, space_id, path)

    async def indexed_documents(self, space_id: str) -> dict[str, IndexedDocument]:
        return await self._read(self._indexed_documents_sync, space_id)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._check_open()
        assert self._search_pool is not None
        return await asyncio.get_running_loop().run_in_executor(self._search_pool, fn, *args)

    def _search_sync(
        self, space_ids: list[str], query: str, limit: int, path_prefix: str
    ) -> list[ScoredChunk]:
        schema = self._schema
        text = bound_query(query)
        terms = [("content", t) for t in _unique(self._analyzer("content").analyze(text))]
        terms += [("content_ids", t) for t in _unique(self._analyzer("ids").analyze(text))]
        if not terms:
            return []
        matches = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(schema, field, term))
                for field, term in terms
            ]
        )
        clauses = [
            (tantivy.Occur.Must, matches),
            (
                tantivy.Occur.Must,
                _filter(tantivy.Query.term_set_query(schema, "space_id", space_ids)),
            ),
        ]
        scope = normalize_path_prefix(path_prefix)
        if scope:
            clauses.append(
                (
                    tantivy.Occur.Must,
                    _filter(tantivy.Query.term_query(schema, PATH_SCOPES_FIELD, scope)),
                )
            )
        with _mapped("search"):
            searcher = self._index.searcher()
            hits = searcher.search(tantivy.Query.boolean_query(clauses), limit, count=False).hits
            return [
                ScoredChunk(chunk=_chunk(searcher.doc(address)), score=float(score))
                for score, address in hits
            ]

    def _chunks_of_sync(self, space_id: str, path: str) -> list[Chunk]:
        with _mapped("chunks_of"):
            searcher = self._index.searcher()
            hits = _every_hit(searcher, _path_query(self._schema, space_id, path))
            chunks = [_chunk(searcher.doc(address)) for _, address in hits]
        return sorted(chunks, key=lambda c: c.chunk_index)

    def _indexed_documents_sync(self, space_id: str) -> dict[str, IndexedDocument]:
        with _mapped("indexed_documents"):
            searcher = self._index.searcher()
            query = tantivy.Query.term_query(self._schema, "space_id", space_id)
            entries = []
            for _, address in _every_hit(searcher, query):
                doc = searcher.doc(address)
                entries.append(
                    (
                        str(doc.get_first("path")),
                        str(doc.get_first("document_id")),
                        int(doc.get_first("doc_version")),
                    )
                )
        return indexed_documents(entries)

    def _analyzer(self, name: str) -> Any:
        """Per-thread analyzers (a tantivy TextAnalyzer is not meant to be shared)."""
        analyzer = getattr(self._analyzers, name, None)
        if analyzer is None:
            analyzer = _content_analyzer() if name == "content" else _ident_analyzer()
            setattr(self._analyzers, name, analyzer)
        return analyzer

    def _check_open(self) -> None:
        if self._index is None or self._closing:
            raise IndexUnavailable(
                "the tantivy keyword index is not open", metadata={"backend": "tantivy"}
            )


# --- schema and documents ----------------------------------------------------------------------


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    for name in _STORED_TEXT:
        builder.add_text_field(name, stored=True, tokenizer_name="raw")
    builder.add_text_field(PATH_SCOPES_FIELD, stored=False, tokenizer_name="raw")
    builder.add_integer_field("chunk_index", stored=True, indexed=True, fast=True)
    builder.add_integer_field("doc_version", stored=True, indexed=True, fast=True)
    builder.add_text_field("content", stored=True, tokenizer_name="en_stem")
    builder.add_text_field(
        "content_ids", stored=False, tokenizer_name=_IDENT_TOKENIZER, index_option="freq"
    )
    return builder.build()


def _content_analyzer() -> Any:
    """The query-side twin of tantivy's built-in `en_stem`, which also drops English stop
    words from the query, as OpenSearch's `english` analyzer does: "what did we decide about
    the billing" matches on "decid" and "bill", not on every chunk holding "the"."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _ident_analyzer() -> Any:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(IDENTIFIER_PATTERN))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def _document(chunk: Chunk) -> Any:
    doc = tantivy.Document()
    doc.add_text("chunk_id", chunk.chunk_id)
    doc.add_text("space_id", chunk.space_id)
    doc.add_text("tenant", chunk.tenant)
    doc.add_text("path", chunk.path)
    doc.add_text("document_id", chunk.document_id)
    for scope in path_scopes(chunk.path):
        doc.add_text(PATH_SCOPES_FIELD, scope)
    doc.add_integer("chunk_index", chunk.chunk_index)
    doc.add_integer("doc_version", chunk.doc_version)
    # The heading trail is a second value of the searched fields: BM25 sees the chunk's text
    # and its headings as one field, and the stored first value stays the chunk's own text.
    doc.add_text("content", chunk.content)
    doc.add_text("content_ids", chunk.content)
    if chunk.heading:
        doc.add_text("content", chunk.heading)
        doc.add_text("content_ids", chunk.heading)
    return doc


def _chunk(doc: Any) -> Chunk:
    return Chunk(
        chunk_id=doc.get_first("chunk_id"),
        document_id=doc.get_first("document_id"),
        space_id=doc.get_first("space_id"),
        tenant=doc.get_first("tenant") or "",
        path=doc.get_first("path"),
        chunk_index=int(doc.get_first("chunk_index")),
        doc_version=int(doc.get_first("doc_version")),
        content=doc.get_first("content") or "",
        heading=_second(doc.get_all("content")),
    )


def _second(values: list[str]) -> str:
    return values[1] if len(values) > 1 else ""


def _every_hit(searcher: Any, query: Any) -> list[Any]:
    """Every (score, address) hit of `query`, asking for more until a page comes back short."""
    limit = _PAGE
    while True:
        hits: list[Any] = searcher.search(query, limit, count=False).hits
        if len(hits) < limit:
            return hits
        limit *= 2


def _path_query(schema: Any, space_id: str, path: str) -> Any:
    return tantivy.Query.boolean_query(
        [
            (tantivy.Occur.Must, tantivy.Query.term_query(schema, "space_id", space_id)),
            (tantivy.Occur.Must, tantivy.Query.term_query(schema, "path", path)),
        ]
    )


def _filter(query: Any) -> Any:
    """A clause that restricts without adding to the BM25 score."""
    return tantivy.Query.const_score_query(query, 0.0)


def _unique(tokens: list[str]) -> list[str]:
    return list(dict.fromkeys(tokens))


def _marker_version(marker: Path) -> int | None:
    try:
        found = json.loads(marker.read_text()).get("schema_version")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, int) else None


@contextmanager
def _mapped(operation: str) -> Iterator[None]:
    """Turns tantivy's and the filesystem's errors into IndexUnavailable, naming the step."""
    try:
        yield
    except (ValueError, RuntimeError, OSError) as exc:
        raise IndexUnavailable(
            f"tantivy keyword index {operation} failed: {exc}", metadata={"backend": "tantivy"}
        ) from None
