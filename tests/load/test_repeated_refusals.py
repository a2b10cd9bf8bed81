"""Issue 29: refused and cut-off large inputs, 20 times in a row, leave `engram dev`'s memory
where it was after the first.

A bound checked once misses memory that accumulates: each refused import of a 318 KB bomb
archive used to keep its quarter gigabyte of decompressed entries (a reference cycle between
the import and its reader, in the oldest GC generation by the time the call ended), so RSS
rose by ~259 MiB per refusal. Here every refusal engram has for a large body is sent 20
times to one server in its own process; RSS after the 20th must be within 64 MiB of RSS after
the 1st, while health checks sent throughout are answered.

The 64 MiB allows for what glibc keeps after a free: engram fixes the mmap threshold at
128 KiB (`engram.runtime.malloc_tuning`), so a freed large block goes back to the kernel,
and what stays is small blocks in the heap's arenas (at most one per thread; measured
growth over 20 refusals: bench/RESULTS.md, "Repeated refusals"). The curve of RSS per call
is printed by bench/import_bench.py --repeat 20.

The same holds for the bodies of the hosted MCP endpoint (`engram mcp --hosted`, in its own
process in front of the server): an oversized HTTP body is refused with 413 after at most
the MCP SDK's 4 MiB has been read (never buffered whole), and memory_write calls refused for
size or for a credential keep nothing in either process.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.v1 import indexer_pb2, indexer_pb2_grpc, space_pb2, storage_pb2, storage_pb2_grpc
from tests.e2e.test_mcp import free_port, text_of, wait_listening
from tests.e2e.test_mcp_hosted import ISSUER, agent
from tests.support import hostile_archives
from tests.support.dev_server import DevServer, ProcessMemory, dev_server
from tests.support.grpc_helpers import CallFailure, import_sync, space
from tests.support.tokens import bearer, mint

pytestmark = pytest.mark.load

MIB = 1024 * 1024
REPEATS = 20
GROWTH_BOUND = 64 * MIB
# The server's import limit, a quarter of the default 256 MiB: the bomb (issue 29's archive of
# 300 x 1 MiB) is refused once 64 MiB are read and held, so a retained refusal would still
# show as 64 MiB a call, 1.2 GiB over the 20 (the bound is 64 MiB), in a quarter of the time
# (20 refusals at the default took ~3 min of CI). bench/import_bench.py --repeat keeps the
# default.
IMPORT_LIMIT = 64 * MIB
# Clean 1 MiB documents read and held before the credential (under the import limit).
CREDENTIAL_AFTER = 32
# The project space the over-quota import targets: 8 MiB, and the archive holds 12.
PROJECT_QUOTA = 8 * MIB
QUOTA_SPACE = space("budget", space_pb2.VISIBILITY_PROJECT, project="atlas")
EXPORTED = space("exported")


def member(case: str) -> tuple[tuple[str, str], ...]:
    # One principal per case: the per-principal rate limit (60 imports a minute) is not
    # what is tested here.
    return bearer(mint(f"ann-{case}", "acme", "member"))


@dataclass(frozen=True)
class Refusal:
    # One call with the large input; returns the status code it ended with.
    send: Callable[[int], Awaitable[grpc.StatusCode]]
    expected: grpc.StatusCode


def refused_import(
    case: str,
    archive: Callable[[], Iterator[bytes]],
    *,
    ref: space_pb2.SpaceRef | None = None,
    who: tuple[tuple[str, str], ...] | None = None,
    expected: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
    says: str = "",
) -> Refusal:
    pieces = list(archive())  # compressed: a few hundred KB to a few MB, sent 20 times

    async def send(port: int) -> grpc.StatusCode:
        outcome = await import_sync(
            port, ref or space(f"imports-{case}"), pieces, who or member(case)
        )
        assert isinstance(outcome, CallFailure), f"the import succeeded: {outcome}"
        assert says in outcome.message, outcome.message  # refused for the case's reason
        return outcome.code

    return Refusal(send, expected)


def refused_write(case: str, content: str) -> Refusal:
    async def send(port: int) -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 16 * MIB)]
        ) as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)
            request = storage_pb2.WriteDocumentRequest(
                space=space(f"writes-{case}"), path="big.md", content=content
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.WriteDocument(request, metadata=member(case), timeout=60)
        return refused.value.code()

    return Refusal(send, grpc.StatusCode.INVALID_ARGUMENT)


async def cut_off_export(port: int) -> grpc.StatusCode:
    """Reads the first message of a 16 MiB space's export, then goes away."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)
        call = stub.ExportSpace(
            storage_pb2.ExportSpaceRequest(space=EXPORTED), metadata=member("export"), timeout=60
        )
        first = await call.read()
        assert isinstance(first, storage_pb2.ExportSpaceResponse) and first.data
        call.cancel()
    return grpc.StatusCode.CANCELLED


def _refusals() -> dict[str, Callable[[], Refusal]]:
    cases: dict[str, Callable[[], Refusal]] = {
        "import_bomb_300x1mib": lambda: refused_import(
            "bomb", hostile_archives.many_documents, says="ENGRAM_MAX_IMPORT_BYTES"
        ),
        "import_credential_scan": lambda: refused_import(
            "credential",
            lambda: hostile_archives.credential_after(clean=CREDENTIAL_AFTER),
            says="remove the credential",
        ),
        "import_forbidden_space": lambda: refused_import(
            "forbidden",
            lambda: hostile_archives.repeated(b"\x1f", 16 * MIB),
            ref=space("plans", space_pb2.VISIBILITY_ORG, tenant="acme"),
            who=bearer(mint("eve", "globex", "viewer")),
            expected=grpc.StatusCode.PERMISSION_DENIED,
        ),
        "import_over_quota": lambda: refused_import(
            "quota",
            lambda: hostile_archives.repeated_paragraphs(12, prefix="quota"),
            ref=QUOTA_SPACE,
            expected=grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        "write_over_size": lambda: refused_write("size", "a" * (3 * MIB)),
        "write_with_credential": lambda: refused_write(
            "secret", "b" * (MIB + MIB // 2) + " " + hostile_archives.CREDENTIAL.decode()
        ),
        "export_cut_off": lambda: Refusal(cut_off_export, grpc.StatusCode.CANCELLED),
    }
    for attack, archive in hostile_archives.ATTACKS.items():
        cases[f"import_{attack}"] = lambda a=attack, f=archive: refused_import(a, f)
    return cases


REFUSALS = _refusals()


async def wait_indexed(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = indexer_pb2_grpc.IndexerServiceStub(channel)
        for _ in range(600):
            status = await stub.GetIndexStatus(
                indexer_pb2.GetIndexStatusRequest(), metadata=member("export"), timeout=10
            )
            if status.backlog == 0:
                return
            await asyncio.sleep(0.2)
    raise AssertionError("the exported space was not indexed within 120 s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with dev_server(
        tmp_path_factory.mktemp("refusals") / "state",
        ENGRAM_QUOTA_PROJECT=str(PROJECT_QUOTA),
        ENGRAM_MAX_IMPORT_BYTES=str(IMPORT_LIMIT),
        # 40 memory_write refusals of one agent: the write rate limits have their own tests.
        ENGRAM_WORKSPACE_WRITES_PER_MINUTE="0",
        ENGRAM_WORKSPACE_WRITES_PER_HOUR="0",
        # With the maintenance schedule on, RSS steps up once by 55-87 MiB about a minute
        # after start (the first walk's time) and stays flat before and after; the same
        # 100 refusals without the schedule grow it 4 MiB (bench/RESULTS.md). Wherever the
        # step landed it would be counted against one refusal case, so it is kept out here.
        ENGRAM_MAINTENANCE_SCHEDULE="false",
    ) as running:
        # The space the export cases read: 16 documents of 1 MiB, indexed before any
        # measurement so the indexer's own growth is not counted.
        loaded = asyncio.run(
            import_sync(
                running.port,
                EXPORTED,
                list(hostile_archives.repeated_paragraphs(16)),
                member("export"),
            )
        )
        assert not isinstance(loaded, CallFailure), loaded.message
        asyncio.run(wait_indexed(running.port))
        yield running


@contextlib.asynccontextmanager
async def health_throughout(port: int) -> AsyncIterator[list[int]]:
    """Health checks every 50 ms while the block runs; yields the count answered so far."""
    answered = [0]
    stop = asyncio.Event()

    async def check() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                answered[0] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.05)

    task = asyncio.create_task(check())
    try:
        yield answered
    finally:
        stop.set()
        await task  # raises if a check failed or timed out


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_repeated_refusal_keeps_no_memory(server: DevServer, case: str) -> None:
    refusal = REFUSALS[case]()
    curve: list[int] = []
    async with health_throughout(server.port) as answered:
        for _ in range(REPEATS):
            code = await refusal.send(server.port)
            assert code == refusal.expected, f"{case}: {code}"
            curve.append(server.rss())
    # Every check sent while the calls ran was answered (a failed or late one raises).
    assert answered[0] >= 1
    growth = curve[-1] - curve[0]
    shown = " ".join(f"{rss / MIB:.0f}" for rss in curve)
    assert growth < GROWTH_BOUND, f"{case}: RSS grew {growth / MIB:.0f} MiB (MiB: {shown})"


# --- the hosted MCP endpoint's bodies --------------------------------------------------------

MCP_BODY_LIMIT = 4 * MIB  # the MCP SDK's max_request_body_size
OVERSIZED = 64 * MIB
MCP_SPACE_PATH = "/mcp/private/mcp-bodies"
MCP_TOKEN = mint("ann-mcp", "acme", "member")


@dataclass(frozen=True)
class HostedMcp:
    port: int
    memory: ProcessMemory


@pytest.fixture(scope="module")
def hosted_mcp(server: DevServer) -> Iterator[HostedMcp]:
    """`engram mcp --hosted` in its own process, in front of the module's server."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "engram", "mcp", "--transport", "http", "--hosted"]
        + ["--issuer", ISSUER, "--port", str(port), "--addr", f"127.0.0.1:{server.port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        asyncio.run(wait_listening(f"http://127.0.0.1:{port}/mcp"))
        yield HostedMcp(port, ProcessMemory(process.pid))
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def post_oversized(port: int, *, chunked: bool) -> tuple[int, int]:
    """POSTs a 64 MiB JSON body (declared by Content-Length, or chunked without a length),
    sending it only while no answer has come; returns (HTTP status, body bytes sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [
        f"POST {MCP_SPACE_PATH} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Authorization: Bearer {MCP_TOKEN}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {OVERSIZED}",
    ]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    answer = asyncio.create_task(asyncio.wait_for(reader.readline(), 60))
    sent = 0
    piece = f"{MIB:x}\r\n".encode() + b"[" * MIB + b"\r\n"
    try:
        while sent < OVERSIZED and not answer.done():
            if not chunked:
                break  # the declared length alone must be refused
            writer.write(piece)
            sent += MIB
            drained = asyncio.ensure_future(writer.drain())
            await asyncio.wait({drained, answer}, return_when=asyncio.FIRST_COMPLETED)
            if not drained.done():
                drained.cancel()
            elif drained.exception() is not None:
                break  # the server closed the connection after answering
        status_line = await answer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return int(status_line.split()[1]), sent


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
async def test_repeated_oversized_mcp_bodies_are_refused_unbuffered(
    hosted_mcp: HostedMcp, chunked: bool
) -> None:
    curve: list[int] = []
    for _ in range(REPEATS):
        hosted_mcp.memory.reset_peak()
        before = hosted_mcp.memory.rss()
        status, sent = await post_oversized(hosted_mcp.port, chunked=chunked)
        assert status == 413
        # Refused after at most the limit (and what the sockets buffer), not the whole body.
        assert sent <= OVERSIZED // 2, f"{sent / MIB:.0f} MiB sent before the answer"
        held = hosted_mcp.memory.peak() - before
        assert held < 2 * MCP_BODY_LIMIT + 8 * MIB, f"peak +{held / MIB:.0f} MiB"
        curve.append(hosted_mcp.memory.rss())
    growth = curve[-1] - curve[0]
    assert growth < GROWTH_BOUND, f"RSS grew {growth / MIB:.0f} MiB"


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        ("a" * (3 * MIB), "CONTENT_TOO_LARGE"),
        ("b" * MIB + " " + hostile_archives.CREDENTIAL.decode(), "SECRET_IN_CONTENT"),
    ],
    ids=["over_size", "with_credential"],
)
async def test_repeated_refused_mcp_writes_keep_no_memory(
    server: DevServer, hosted_mcp: HostedMcp, content: str, refusal: str
) -> None:
    mcp_curve: list[int] = []
    server_curve: list[int] = []
    url = f"http://127.0.0.1:{hosted_mcp.port}{MCP_SPACE_PATH}"
    async with agent(url, MCP_TOKEN) as client:
        for _ in range(REPEATS):
            result = await client.call_tool("memory_write", {"content": content})
            assert result.is_error and refusal in text_of(result), text_of(result)[:200]
            mcp_curve.append(hosted_mcp.memory.rss())
            server_curve.append(server.rss())
    for name, curve in (("engram mcp", mcp_curve), ("engram dev", server_curve)):
        growth = curve[-1] - curve[0]
        shown = " ".join(f"{rss / MIB:.0f}" for rss in curve)
        assert growth < GROWTH_BOUND, f"{name}: RSS grew {growth / MIB:.0f} MiB (MiB: {shown})"
