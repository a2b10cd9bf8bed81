"""`engram watch`: print a space's changes as they happen (WatchSpace), resuming by itself."""

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engram.cli.client import (
    AddrOption,
    BotOption,
    NameOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    call,
    channel,
    err_console,
    explain,
    metadata,
)

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from engram.v1 import storage_pb2

# ChangeKind numbers of storage.proto.
KINDS = {1: "written", 2: "deleted", 3: "purged", 4: "space_deleted"}


def change_record(change: "storage_pb2.SpaceChange") -> dict[str, Any]:
    """One `--json` line."""
    return {
        "cursor": change.cursor,
        "kind": KINDS.get(change.kind, "unspecified"),
        "path": change.path,
        "version": change.version,
        "sha256": change.sha256,
        "size_bytes": change.size_bytes,
        "at": change.at.ToDatetime().isoformat() + "Z",
        "document_id": change.document_id,
        "event_id": change.event_id,
    }


def change_line(change: "storage_pb2.SpaceChange") -> str:
    record = change_record(change)
    target = record["path"] or "(the whole space)"
    return (
        f"{record['at']}  {record['kind']:<13} {target}  v{record['version']}  "
        f"{record['size_bytes']} B  cursor={record['cursor']}"
    )


def _worth_resuming(error: BaseException, *, connected: bool) -> bool:
    """UNAVAILABLE from a server that answered before (restarting) or that says why (NATS
    away), or a stream that ended: resume from the cursor. A server that never answered (a
    wrong --addr) fails at once."""
    import grpc

    from engram.runtime.errors import received_status

    if isinstance(error, ConnectionError):
        return True
    if not isinstance(error, grpc.RpcError):
        return False
    received = received_status(error)
    return received.code == grpc.StatusCode.UNAVAILABLE and (connected or bool(received.reason))


def _say_resuming(state: "RetryCallState") -> None:
    import grpc

    error = state.outcome.exception() if state.outcome else None
    reason = explain(error) if isinstance(error, grpc.RpcError) else "the stream ended"
    err_console.print(f"[yellow]{reason}; resuming from the last cursor[/]", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def watch(
        cursor: Annotated[
            str, typer.Option("--cursor", help="Resume after this change's cursor.")
        ] = "",
        from_start: Annotated[
            bool, typer.Option("--from-start", help="Replay every retained change first.")
        ] = False,
        as_json: Annotated[
            bool, typer.Option("--json", help="One JSON object per change, per line.")
        ] = False,
        count: Annotated[
            int, typer.Option("--count", min=0, help="Stop after this many changes (0: never).")
        ] = 0,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Print the space's changes as they happen (written, deleted, purged). Resumes by
        itself from the last cursor when the server goes away; Ctrl-C prints that cursor."""
        from tenacity import Retrying, retry_if_exception, wait_exponential

        from engram.v1 import storage_pb2, storage_pb2_grpc

        space = SpaceFlags(
            visibility=visibility, name=name, project=project, bot=bot, user=user, tenant=tenant
        ).to_proto()
        position: dict[str, Any] = {"cursor": cursor, "seen": 0, "connected": False}

        def follow() -> None:
            with channel(addr) as opened:
                stub = storage_pb2_grpc.StorageServiceStub(opened)
                request = storage_pb2.WatchSpaceRequest(
                    space=space,
                    cursor=position["cursor"],
                    from_start=from_start and not position["cursor"],
                )
                for response in stub.WatchSpace(request, metadata=metadata(token)):
                    position["connected"] = True
                    if response.caught_up:
                        if not as_json:
                            err_console.print("[dim]caught up; watching for changes[/]")
                        continue
                    change = response.change
                    position["cursor"] = change.cursor
                    position["seen"] += 1
                    typer.echo(
                        json.dumps(change_record(change)) if as_json else change_line(change)
                    )
                    if count and position["seen"] >= count:
                        return
            # The server ended the stream without an error (it never does on its own).
            raise ConnectionError("the stream ended")

        resuming = Retrying(
            retry=retry_if_exception(lambda e: _worth_resuming(e, connected=position["connected"])),
            wait=wait_exponential(multiplier=0.2, max=5.0),
            before_sleep=_say_resuming,
            reraise=True,
        )
        try:
            call(lambda: resuming(follow))
        except KeyboardInterrupt:
            if position["cursor"]:
                err_console.print(f"stopped; resume with --cursor {position['cursor']}")
