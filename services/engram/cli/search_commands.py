"""`engram search`: hybrid search over one or more spaces, printed as a table."""

from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from engram.cli.client import (
    VISIBILITIES,
    AddrOption,
    BotOption,
    JsonOption,
    NameOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    call,
    console,
    emit,
    engram_client,
    fail,
    space_label,
)

if TYPE_CHECKING:
    from engram.client import SearchResults
    from engram.v1 import space_pb2

# SearchMode numbers of search.proto.
MODES = {"hybrid": 1, "lexical": 2, "semantic": 3}
# The qualifiers a space spec carries before its name, per visibility.
SPEC_QUALIFIERS = {
    "bot": ("project", "bot"),
    "project": ("project",),
    "user": ("user",),
}
SPACE_HELP = (
    "A space to search (repeatable, up to 16): VISIBILITY:NAME, with the qualifiers first "
    "for project:PROJECT/NAME and bot:PROJECT/BOT/NAME; user:NAME is your own user space. "
    "A space id (v1:...) works too. Default: the space of -v/-n and the qualifiers."
)
SNIPPET_CHARS = 60


def parse_space(spec: str, *, tenant: str = "") -> "space_pb2.SpaceRef":
    """`private:notes`, `project:p1/notes`, `bot:p1/b1/runs`, `user:me`, or a `v1:` id."""
    from engram.v1 import space_pb2

    if spec.startswith("v1:"):
        parts = spec.split(":")
        if len(parts) != 7 or parts[1] not in VISIBILITIES:
            fail(f"--space {spec!r} is not a space id (v1:VISIBILITY:TENANT:PROJECT:BOT:USER:NAME)")
        _, visibility, id_tenant, project, bot, user, name = parts
        return space_pb2.SpaceRef(
            visibility=cast("space_pb2.Visibility.ValueType", VISIBILITIES[visibility]),
            tenant=id_tenant,
            project=project,
            bot=bot,
            user=user,
            name=name,
        )
    visibility, sep, rest = spec.partition(":")
    if not sep or visibility not in VISIBILITIES:
        fail(f"--space {spec!r}: start with one of {', '.join(VISIBILITIES)} and a colon")
    segments = rest.split("/")
    qualifiers = SPEC_QUALIFIERS.get(visibility, ())
    # A user space may leave its user out: the server stamps the caller's.
    optional = visibility == "user" and len(segments) == 1
    if not optional and len(segments) != len(qualifiers) + 1:
        shape = "/".join(q.upper() for q in (*qualifiers, "name"))
        fail(f"--space {spec!r}: {visibility} spaces are written {visibility}:{shape}")
    fields = dict(zip(qualifiers, segments[:-1], strict=False))
    return space_pb2.SpaceRef(
        visibility=cast("space_pb2.Visibility.ValueType", VISIBILITIES[visibility]),
        tenant=tenant,
        name=segments[-1],
        **fields,
    )


def snippet(text: str) -> str:
    """A result's text on one line, cut to SNIPPET_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1] + "…"


def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    space: Annotated[
        list[str] | None, typer.Option("--space", "-s", help=SPACE_HELP, show_default=False)
    ] = None,
    mode: Annotated[str, typer.Option("--mode", "-m", help="|".join(MODES))] = "hybrid",
    limit: Annotated[int, typer.Option("--limit", "-l", help="Results, 1 to 100.")] = 5,
    path_prefix: Annotated[
        str, typer.Option("--path", help="Only under this directory (or this document).")
    ] = "",
    min_score: Annotated[
        float, typer.Option("--min-score", help="Drop results scoring below this (0..1).")
    ] = 0.0,
    bm25_weight: Annotated[
        float, typer.Option("--bm25-weight", help="RRF weight of BM25 (0 = 1.0).")
    ] = 0.0,
    vector_weight: Annotated[
        float, typer.Option("--vector-weight", help="RRF weight of vectors (0 = 1.0).")
    ] = 0.0,
    rrf_k: Annotated[float, typer.Option("--rrf-k", help="RRF k (0 = 60).")] = 0.0,
    min_relevance: Annotated[
        float,
        typer.Option(
            "--min-relevance",
            help="No results unless one is at least this likely relevant (0..1).",
        ),
    ] = 0.0,
    fusion: Annotated[
        str, typer.Option("--fusion", help="convex|rrf (default: the server's).")
    ] = "",
    collapse: Annotated[
        bool, typer.Option("--collapse", help="At most one result per document.")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="Print each result's whole chunk after the table.")
    ] = False,
    visibility: VisibilityOption = "private",
    name: NameOption = "default",
    project: ProjectOption = "",
    bot: BotOption = "",
    user: UserOption = "",
    tenant: TenantOption = "",
    addr: AddrOption = "127.0.0.1:50051",
    token: TokenOption = "",
    as_json: JsonOption = False,
) -> None:
    """Search spaces (default: the -v/-n space, private:default) by keywords and meaning
    together."""
    from engram.client.mapping import space_from_proto

    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}")
    if fusion not in ("", "convex", "rrf"):
        fail("--fusion must be convex or rrf")
    spaces = (
        [space_from_proto(parse_space(spec, tenant=tenant)) for spec in space]
        if space
        else [SpaceFlags(visibility, name, project, bot, user, tenant).to_space()]
    )
    with engram_client(addr, token) as client:
        response = call(
            lambda: client.search(
                query,
                spaces=spaces,
                limit=limit,
                mode=mode,
                path_prefix=path_prefix,
                min_score=min_score,
                bm25_weight=bm25_weight,
                vector_weight=vector_weight,
                rrf_k=rrf_k,
                min_relevance=min_relevance,
                fusion=fusion,
                collapse_documents=collapse,
            )
        )
    if as_json:
        emit(search_record(response))
        return
    render_search(response, full=full)


def render_search(response: "SearchResults", *, full: bool) -> None:
    """The results as a table (paths and numbers whole, the snippet wrapped), then any
    degradation, the count and, with `full`, each whole chunk."""
    from rich.table import Table
    from rich.text import Text

    several_spaces = len({result.space_id for result in response.results}) > 1
    # Paths and numbers stay whole; the snippet wraps to make room for them.
    table = Table()
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("path", no_wrap=True)
    for column in ("chunk", "score", "relevance", "bm25", "vector"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("text")
    for number, result in enumerate(response.results, start=1):
        where = Text(result.path)
        if several_spaces:
            where.append(f"\n{space_label(result.space_id)}", style="dim")
        table.add_row(
            str(number),
            where,
            str(result.chunk_index),
            f"{result.score:.3f}",
            f"{result.relevance:.3f}",
            f"#{result.bm25_rank}" if result.bm25_rank else "-",
            f"#{result.vector_rank}" if result.vector_rank else "-",
            snippet(result.content),
        )
    if response.results:
        console.print(table)
    for reason in response.degraded_reasons:
        console.print(f"[yellow]degraded:[/] {reason}", highlight=False)
    console.print(f"[dim]{response.result_count} result(s) for {response.query!r}[/]")
    if full:
        for number, result in enumerate(response.results, start=1):
            console.rule(f"#{number} {result.path} (chunk {result.chunk_index})")
            console.print(result.content, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command()(search)


def search_record(response: "SearchResults") -> dict[str, Any]:
    """A search's `--json` fields."""
    return {
        "query": response.query,
        "result_count": response.result_count,
        "degraded": response.degraded,
        "degraded_reasons": list(response.degraded_reasons),
        "results": [
            {
                "space_id": result.space_id,
                "space": space_label(result.space_id),
                "path": result.path,
                "document_id": result.document_id,
                "chunk_id": result.chunk_id,
                "chunk_index": result.chunk_index,
                "score": result.score,
                "bm25_score": result.bm25_score,
                "vector_score": result.vector_score,
                "bm25_rank": result.bm25_rank,
                "vector_rank": result.vector_rank,
                "is_hybrid_match": result.is_hybrid_match,
                "relevance": result.relevance,
                "content": result.content,
            }
            for result in response.results
        ],
    }
